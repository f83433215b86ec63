"""GPU time of the trusted side's per-call input preparation (``Arena.prepare``), whole and by part.

    python bench/prepare_cost.py --out bench/results/prepare_cost.txt [--tasks Gemm-sm90a MhaFwd-sm90a]

Every call of a timing trial, warm-up included, gets fresh values (``arena.py``): the previous draw is
compared with the shared buffers (the input-mutation check: ``compare.same_bits`` since 2026-12-05,
``torch.equal`` before; both are timed), a new draw is made on the device, copied
into the shared buffers, and the outputs are poisoned. This times, with CUDA events on the trusted
side's stream (median of ``--repeats`` calls after 3 unmeasured), ``Arena.prepare(set, fresh=True)``
whole (its host wall time too: it syncs once for the comparison), then each part alone on tensors of
the task's shapes: the comparison (``torch.equal``), the draw (``draw_fresh``), the copy and the poison.
No worker and no candidate: the arena alone, on device 0.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from provenance import commit


def _events(torch, fn, repeats: int) -> tuple[float, float]:
    """Median GPU ms (events) and median host ms of ``fn`` over ``repeats`` runs (3 unmeasured first)."""
    gpu, host = [], []
    for k in range(repeats + 3):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t = time.perf_counter()
        a.record()
        fn()
        b.record()
        host_ms = (time.perf_counter() - t) * 1e3
        torch.cuda.synchronize()
        if k >= 3:
            gpu.append(a.elapsed_time(b))
            host.append(host_ms)
    return statistics.median(gpu), statistics.median(host)


def measure(task_id: str, repeats: int) -> list[str]:
    import torch

    from ptxgym.evaluation.compare import poison_, same_bits
    from ptxgym.evaluation.trusted import fused_inputs
    from ptxgym.evaluation.trusted.arena import Arena
    from ptxgym.evaluation.trusted.inputs import draw_fresh
    from ptxgym.evaluation.trusted.verified_pool import PoolEntry
    from ptxgym.records.tasks import get_task

    task = get_task(task_id)
    with tempfile.TemporaryDirectory() as scratch:
        arena = Arena(task, [1], 0, Path(scratch), fused=True)
        try:
            gen = torch.Generator(device=arena.device).manual_seed(7)
            s = arena.sets[0]
            fresh_bytes = sum(s.shared_in[n].numel() * s.shared_in[n].element_size() for n in arena.fresh)
            out_bytes = sum(t.numel() * t.element_size() for t in s.shared_out.values())
            entry = PoolEntry(fresh=draw_fresh(task, arena.fresh, gen, arena.device), reference={})
            prepares = {}
            plan = arena._fill
            for path in ("fused", "torch ops"):
                arena._fill = plan if path == "fused" else None
                if path == "fused" and plan is None:
                    continue
                for what, e in (("a new draw", None), ("a pool entry", entry)):
                    prepares[f"{path}, {what}"] = _events(
                        torch, lambda e=e: arena.prepare(0, gen, fresh=True, entry=e), repeats
                    )
            arena._fill = plan
            drawn = draw_fresh(task, arena.fresh, gen, arena.device)
            parts = {
                "compare (torch.equal, host sync)": lambda: [
                    torch.equal(s.shared_in[n], drawn[n]) for n in arena.fresh
                ],
                "compare (same_bits: 8-byte words, host sync)": lambda: [
                    same_bits(s.shared_in[n], drawn[n]) for n in arena.fresh
                ],
                "draw (draw_fresh)": lambda: draw_fresh(task, arena.fresh, gen, arena.device),
                "copy into the shared buffers": lambda: [s.shared_in[n].copy_(drawn[n]) for n in arena.fresh],
                "poison the outputs": lambda: [poison_(t) for t in s.shared_out.values()],
            }
            if plan is not None:
                flag = fused_inputs.flag(arena.device)
                keys = fused_inputs.seeds(gen, len(arena.fresh), arena.device)
                one = torch.ones(1, device=arena.device)
                parts["compare (fused_inputs.differ_all, one host read)"] = lambda: fused_inputs.differ_all(
                    [(s.shared_in[n], drawn[n]) for n in arena.fresh], flag
                )
                parts["draw, signs and both writes (fused_inputs.fill)"] = lambda: [
                    fused_inputs.fill(s.shared_in[n], one, keys, k) for k, n in enumerate(arena.fresh)
                ]
            lines = [
                f"{task_id}: fresh inputs {list(arena.fresh)} {fresh_bytes / 1e6:.0f} MB, outputs "
                f"{out_bytes / 1e6:.0f} MB",
                f"  fused path: {arena.fused}",
            ]
            for name, (g, h) in prepares.items():
                lines.append(f"  prepare(fresh=True) whole, {name}: GPU {g:.3f} ms, host {h:.3f} ms")
            for name, fn in parts.items():
                g, h = _events(torch, fn, repeats)
                lines.append(f"  {name}: GPU {g:.3f} ms, host {h:.3f} ms")
            return lines
        finally:
            arena.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", nargs="*", default=["Gemm-sm90a", "MhaFwd-sm90a", "MhaBwd-sm90a"])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    import torch

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    lines = [
        f"# prepare cost {stamp}, {torch.cuda.get_device_name(0)}, commit {commit()} (bench/prepare_cost.py)"
    ]
    lines.append(
        f"# median of {args.repeats} runs each (CUDA events on the current stream; host wall beside)"
    )
    for task_id in args.tasks:
        lines += measure(task_id, args.repeats)
        print("\n".join(lines[-14:]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
