"""Where a verified timed call's check spends the GPU turn (issue 11: the MHA forward's ``time_verify``).

``bench/gpu_cost.py`` shows one figure per turn, ``time_verify`` (0.29 s of an MHA forward turn on the
H100, ``bench/results/gpu_cost_2026-12-06_s37_warm_false_h100.txt``). This script takes the same checks
apart on a real arena of each task, each piece timed alone (device synchronised around it, median of
``--repeats``): a timed call's input preparation (a new draw, ``Arena.prepare``), the whole reference
of a new draw, a verified call checked on a sample (``Arena.verify``), a held call checked whole and on
a sample (``Arena.check_held``), a pool entry's held check (its stored reference), and the output
comparison alone (``compare.check_call``). Then what one evaluation's count of each comes to.

    python bench/verify_cost.py --tasks MhaFwd-sm90a Gemm-sm90a --out bench/results/verify_cost_<date>.txt
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from provenance import commit


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Median wall seconds of ``fn`` with the device synchronised before and after each run."""
    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    fn()  # warm: the allocator's blocks and the kernels' first launches
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


PREVIOUS_FORWARD = """
def run(Q, K, V, causal=CAUSAL):
    # the attention forward's reference until 2026-12-06 (torch.logsumexp, then exp(s - lse) in place)
    B, H, S, D = Q.shape
    scale = 1.0 / math.sqrt(D)
    q, k, v = (t.reshape(B * H, S, D) for t in (Q, K, V))
    O = torch.empty_like(q)
    LSE = torch.empty(B * H, S, dtype=torch.float32, device=Q.device)
    hidden = torch.ones(S, S, dtype=torch.bool, device=Q.device).triu(1) if causal else None
    for i, j in _chunks(B * H, S):
        s = (q[i:j].float() @ k[i:j].float().transpose(1, 2)) * scale
        if hidden is not None:
            s.masked_fill_(hidden, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = s.sub_(lse[..., None]).exp_()
        O[i:j] = (p @ v[i:j].float()).to(Q.dtype)
        LSE[i:j] = lse
    return O.view(B, H, S, D), LSE.view(B, H, S)
"""
"""The attention forward's previous reference, timed beside the shipped one (one run, one device)."""


def pieces(task_id: str, repeats: int, scratch: Path, device: int | str = 0) -> dict[str, float]:
    """Each piece of a verified call's check on a real arena of ``task_id``, median seconds."""
    import torch

    from ptxgym.evaluation.compare import check_call
    from ptxgym.evaluation.trusted.arena import Arena, Held
    from ptxgym.evaluation.trusted.base import EvalSettings
    from ptxgym.evaluation.trusted.inputs import run_reference
    from ptxgym.records.tasks import get_task

    task = get_task(task_id)
    share = EvalSettings().verify_sample_share
    arena = Arena(task, [1, 2, 3], device, scratch, sample_share=share)
    gen = torch.Generator(device=arena.device).manual_seed(0)
    s = arena.sets[0]
    out = {"prepare (a new draw)": timed(lambda: arena.prepare(0, gen, fresh=True), repeats)}
    want = arena.expected_inputs(0)
    out["whole reference"] = timed(lambda: run_reference(task, arena.namespace, want), repeats)
    if task.family == "mha_fwd":
        previous = dict(arena.namespace)
        causal = "causal" in task.definition.name
        exec(PREVIOUS_FORWARD.replace("CAUSAL", str(causal)), previous)  # noqa: S102 - our own text
        out["whole reference, the previous formula"] = timed(
            lambda: run_reference(task, previous, want), repeats
        )
        got, old = run_reference(task, arena.namespace, want), run_reference(task, previous, want)
        for name in got:
            diff = (got[name].float() - old[name].float()).abs().max().item()
            out[f"the two formulas' largest difference in {name} (not s)"] = diff
    reference = run_reference(task, arena.namespace, want)
    for name, value in reference.items():
        s.shared_out[name].copy_(value)
    copies = {n: t.clone() for n, t in s.shared_out.items()}
    if arena.sampling.startswith("on"):
        out["verify on a sample (inputs checked too)"] = timed(lambda: arena.verify(0), repeats)
    whole = Held(0, copies, s.state, s.fresh, None, whole=True)
    sample = Held(0, copies, s.state, s.fresh, None, whole=False)
    entry = Held(0, copies, s.state, None, reference, whole=False)
    out["held, checked whole"] = timed(lambda: arena.check_held(whole), repeats)
    out["held, checked on a sample"] = timed(lambda: arena.check_held(sample), repeats)
    out["held pool entry (stored reference)"] = timed(lambda: arena.check_held(entry), repeats)
    out["compare only"] = timed(lambda: check_call(copies, reference, {}, {}, task.tolerance), repeats)
    for label, held in (("whole", whole), ("sample", sample), ("entry", entry)):
        assert arena.check_held(held).passed, f"{task_id}: the {label} check failed on the reference itself"
    out["sampled checks (1: on)"] = float(arena.sampling.startswith("on"))
    return out


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--tasks", nargs="+", default=["MhaFwd-sm90a", "Gemm-sm90a"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="0", help="a CUDA ordinal, or cpu (a smoke run of small tasks)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    lines = [
        f"# verify cost {time.strftime('%Y-%m-%dT%H:%M:%S')} commit {commit()} gpu {gpu} torch "
        f"{torch.__version__}; median of {args.repeats}, seconds",
        "task | piece | s",
    ]
    for task_id in args.tasks:
        with tempfile.TemporaryDirectory() as scratch:
            device = int(args.device) if args.device.isdigit() else args.device
            for piece, s in pieces(task_id, args.repeats, Path(scratch), device).items():
                lines.append(f"{task_id} | {piece} | {s:.4f}")
                print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
