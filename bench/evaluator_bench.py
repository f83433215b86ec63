"""Measurements of the local GPU evaluator on the device (issue 3), and a probe of its tools.

    python bench/evaluator_bench.py probe  OUT_DIR   # tools, ops and raw ncu / memcheck output
    python bench/evaluator_bench.py bench  [--hostile 100] [--budget-s 300]

``bench`` prints, one block each: the baseline against itself for the five tasks (speedup of two
independent measurements, per-trial CV, whether the baseline passes the task tolerance, the fp32
reference time), warm evaluation wall time per candidate against its GPU-time floor (183 executions x
median latency), recovery time after a hang and after a crash (wall time of the next verdict), Nsight
Compute wall time per candidate, and GPU memory before/after N hostile candidates. Test candidates are
the kernels in ``ptxgym/audit/kernels`` (built with the product's nvcc flags).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TASKS = ("Gemm-sm90a", "MhaFwd-sm90a", "MhaFwdCausal-sm90a", "MhaBwd-sm90a", "MhaBwdCausal-sm90a")
FACTS_MS = {
    "Gemm-sm90a": 0.778,
    "MhaFwd-sm90a": 2.743,
    "MhaFwdCausal-sm90a": 1.445,
    "MhaBwd-sm90a": 8.001,
    "MhaBwdCausal-sm90a": 4.552,
}
CHEAP_HOSTILE = (
    "noop",
    "half_written",
    "nan_output",
    "input_mutating",
    "illegal_address",
    "exit_process",
    "device_reset",
    "call_counting",
    "pointer_cache",
    "huge_alloc",
)


def say(*parts) -> None:
    """Print a line now (the device log is read back even if a later step dies)."""
    print(*parts, flush=True)


def task_for(task_id: str):
    """A catalog task, with the backward tasks' derived-input function repaired if need be.

    The catalog's ``forward_state`` returned a set literal (``{{...}}``, reported to its owner); while it
    does, the bench uses a repaired copy and says so in its output.
    """
    from ptxgym.records.tasks import get_task

    task = get_task(task_id)
    ref = task.definition.reference
    if '{{"O": O, "LSE": LSE}}' in ref:
        say(
            f"WARNING {task_id}: catalog forward_state returns a set literal (bug); the bench uses a "
            "repaired copy"
        )
        fixed = ref.replace('{{"O": O, "LSE": LSE}}', '{"O": O, "LSE": LSE}')
        task = task.model_copy(update={"definition": task.definition.model_copy(update={"reference": fixed})})
    return task


# ------------------------------------------------------------------------------------------------ probe


def probe(out: Path) -> None:
    """Environment, baseline ops against the reference, raw ncu and compute-sanitizer output."""
    import torch

    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    say("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
    say("gpu", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
    from ptxgym.evaluation.trusted.gpuinfo import device_facts, sm_clock_mhz

    say("facts", device_facts(0), "sm clock", sm_clock_mhz(0))
    for tool in ("ncu", "compute-sanitizer", "nvidia-smi", "cuobjdump"):
        from ptxgym.evaluation.trusted.tools import find_tool

        say("tool", tool, find_tool(tool) or shutil.which(tool))
    for name in ("_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward"):
        op = getattr(torch.ops.aten, name, None)
        say("op", name, op.default._schema if op is not None else "MISSING")
    _probe_cupti()
    _probe_baselines()
    _probe_tools(out)


def _probe_cupti() -> None:
    try:
        import torch

        from ptxgym.evaluation.sandboxed.cupti_spans import CuptiSpans

        spans = CuptiSpans()
        x = torch.randn(4096, 4096, device="cuda")
        spans.begin()
        torch.cuda.synchronize()
        t0 = spans.now()
        y = x @ x
        torch.cuda.synchronize()
        spans.window(1, t0, spans.now())
        got, counts = spans.end()
        say("cupti ok: span ms", got, "activities", counts, float(y[0, 0]))
    except Exception as exc:  # noqa: BLE001 - a probe reports whatever happens
        say("cupti FAILED:", type(exc).__name__, exc)


def _probe_baselines() -> None:
    import torch

    from ptxgym.evaluation.compare import check_call
    from ptxgym.evaluation.sandboxed import library_baselines as baselines
    from ptxgym.evaluation.trusted.inputs import (
        generate_inputs,
        load_reference,
        reference_options,
        run_reference,
    )

    for task_id in TASKS:
        try:
            task = task_for(task_id)
            ns = load_reference(task)
            inputs = generate_inputs(task, ns, 1, "cuda")
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            ref = run_reference(task, ns, inputs)
            torch.cuda.synchronize()
            ref_s = time.perf_counter() - t0
            outs = {n: torch.empty(task.shapes()[n], dtype=r.dtype, device="cuda") for n, r in ref.items()}
            fn = getattr(baselines, task.baseline.function)
            got = fn(*inputs.values(), *outs.values(), **reference_options(task, ns))
            if got is not None:
                for dst, src in zip(outs.values(), got, strict=True):
                    dst.copy_(src.reshape(dst.shape))
            check = check_call(outs, ref, {}, {}, task.tolerance)
            norms = {o.name: round(o.rel_norm_error or -1, 5) for o in check.outputs}
            say(
                f"baseline {task_id}: {check.status.value} rel_norm={norms} reference {ref_s:.2f} s "
                f"{check.message}"
            )
        except Exception as exc:  # noqa: BLE001 - a probe reports whatever happens
            say(f"baseline {task_id} FAILED: {type(exc).__name__}: {exc}"[:2000])


def _probe_tools(out: Path) -> None:
    import torch

    from ptxgym.audit.corpus import build_kernel
    from ptxgym.evaluation.trusted import memcheck, ncu
    from ptxgym.evaluation.trusted.memcheck import run_memcheck
    from ptxgym.evaluation.trusted.tools import ProofDirs, driver_argv, find_tool, read_report
    from ptxgym.records.arch import HOPPER
    from ptxgym.records.tasks import get_task

    g = torch.Generator(device="cuda").manual_seed(0)
    inputs = Path("/tmp/ptxgym_probe_gemm_inputs.pt")
    a = torch.randn(8192, 5120, generator=g, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(7168, 5120, generator=g, device="cuda", dtype=torch.bfloat16)
    torch.save(
        {
            "inputs": {"A": a.cpu(), "B": b.cpu()},
            "order": ["A", "B"],
            "outputs": {"C": ([8192, 7168], "bfloat16")},
        },
        inputs,
    )
    tool = find_tool("ncu")
    gemm = get_task("Gemm-sm90a")
    for name in ("tma_gemm", "decoy_wgmma"):
        so = build_kernel(name)
        dirs = ProofDirs.create()
        try:
            driver = driver_argv(inputs, so, "run", 0, "profile", scratch=dirs.scratch)
            kernels, reason, wall, _ = ncu.read_profile(tool, driver, dirs, 300)
            (out / f"ncu_{name}.csv").write_text(read_report(dirs.report / ncu.SOURCE_CSV) or "")
        finally:
            dirs.remove()
        info = ncu.target_info(kernels or [], HOPPER, gemm.flops)
        say(
            f"ncu {name}: wall={wall:.1f}s kernels={len(kernels or [])} failed={reason!r} "
            f"executed={info.executed.value} share={info.mma_share} {info.message[:200]}"
        )
    texts = []
    for name in ("oob_read", "naive"):
        dirs = ProofDirs.create()
        try:
            info, wall, _ = run_memcheck(inputs, build_kernel(name), "run", 0, 300, dirs)
            report = read_report(dirs.report / memcheck.REPORT) or ""
        finally:
            dirs.remove()
        say(f"memcheck {name}: {info} wall={wall:.1f}s")
        texts.append(f"### {name}\n{report[-4000:]}\n")
    (out / "memcheck.txt").write_text("\n".join(texts))
    inputs.unlink()


# ------------------------------------------------------------------------------------------------ bench


def bench(hostile: int, budget_s: float, spares: int, tasks: tuple[str, ...], chosen: set[str]) -> None:
    """All measurements, in order of importance, until the time budget runs out."""
    from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode, TargetMode
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    t_start = time.perf_counter()
    settings = EvalSettings(
        memcheck=MemcheckMode.NEVER, target_mode=TargetMode.OFF, call_timeout_s=60.0, baseline_from_disk=False
    )
    ev = LocalGpuEvaluator(settings=settings, spares=spares)
    say(f"# evaluator bench {datetime.datetime.now().isoformat(timespec='seconds')}")
    say(
        f"# gpu {ev.facts.name} driver {ev.facts.driver} cuda {ev.facts.cuda_runtime} torch {ev.facts.torch} "
        f"L2 {ev.facts.l2_bytes >> 20} MiB flush {ev.flush_bytes >> 20} MiB spares {spares}"
    )
    _smi_clocks()
    steps = [
        ("baselines", lambda: _baselines(ev, tasks)),
        ("candidates", lambda: _candidates(ev)),
        ("recovery", lambda: _recovery(ev)),
        ("ncu", lambda: _ncu(ev)),
        ("memory", lambda: _memory(ev, hostile, t_start + budget_s)),
    ]
    steps = [(name, step) for name, step in steps if name in chosen]
    try:
        for name, step in steps:
            left = budget_s - (time.perf_counter() - t_start)
            if left < 20:
                say(f"## {name}: SKIPPED (time budget spent)")
                continue
            say(f"## {name} (budget left {left:.0f} s)")
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - one failed block must not lose the others
                import traceback

                say(f"## {name} FAILED: {type(exc).__name__}: {exc}")
                say(traceback.format_exc()[-2000:])
    finally:
        say(
            f"# backend {ev.backend} ({ev.cupti_error or 'cupti ok'}); "
            f"total {time.perf_counter() - t_start:.0f} s"
        )
        ev.close()


def _smi_clocks() -> None:
    exe = shutil.which("nvidia-smi")
    if exe:
        q = "clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw"
        out = subprocess.run([exe, f"--query-gpu={q}", "--format=csv"], capture_output=True, text=True)
        say("# nvidia-smi", " | ".join(out.stdout.strip().splitlines()))


def _baselines(ev, tasks: tuple[str, ...]) -> None:
    say(
        "task | baseline A ms | baseline B ms | A/B | CV A | CV B | correct | rel-norm | FACTS ms | "
        "warm wall s | floor s (183 x median) | wall/floor"
    )
    for task_id in tasks:
        task = task_for(task_id)
        t0 = time.perf_counter()
        ev._arena(task)
        arena_s = time.perf_counter() - t0
        ev.settle()
        t0 = time.perf_counter()
        a = ev.baseline(task)  # measured now (disk cache off) and kept for the candidates below
        wall_a = time.perf_counter() - t0
        ev.settle()
        t0 = time.perf_counter()
        b = ev.measure_baseline(task)
        wall_b = time.perf_counter() - t0
        if a.stats is None or b.stats is None:
            say(f"{task_id} | FAILED: {a.message}")
            continue
        floor = 183 * b.stats.median_ms / 1e3
        say(
            f"{task_id} | {a.stats.median_ms:.4f} | {b.stats.median_ms:.4f} | "
            f"{a.stats.median_ms / b.stats.median_ms:.4f} | {a.stats.cv:.2%} | {b.stats.cv:.2%} | "
            f"{a.correct and b.correct} | {b.rel_norm_error:.2e} | {FACTS_MS[task_id]} | "
            f"{wall_b:.2f} (first {wall_a:.2f}) | {floor:.3f} | {wall_b / floor:.2f}"
        )
        say(
            f"   arena (inputs + fp32 reference, {len(ev._arena(task).sets)} "
            f"sets) {arena_s:.1f} s; trial medians A {a.stats.trials_median_ms} B {b.stats.trials_median_ms}"
        )


def _evaluate(ev, task, name):
    from ptxgym.audit.corpus import candidate

    cand = candidate(name, task)
    t0 = time.perf_counter()
    verdict = ev.evaluate(task, cand)
    return verdict, time.perf_counter() - t0


def _executions(settings) -> int:
    """Kernel executions of one evaluation: correctness calls + trials x (warm-up + timed)."""
    return settings.correctness_sets + settings.trials * (settings.warmup + settings.iterations)


def _candidates(ev) -> None:
    from ptxgym.records.tasks import get_task

    saved = ev.settings
    ev.settings = saved.model_copy(update={"warmup": 2, "iterations": 10, "trials": 1})
    n = _executions(ev.settings)
    say(f"candidate | status | median ms | speedup | warm wall s | floor s ({n} x median) | wall/floor")
    try:
        for task_id, name in (
            ("Gemm-sm90a", "naive"),
            ("Gemm-sm90a", "tma_gemm"),
            ("MhaFwd-sm90a", "mha_fwd_naive"),
        ):
            task = get_task(task_id)
            ev.settle()
            verdict, wall = _evaluate(ev, task, name)
            t = verdict.timing
            if t is None or t.candidate is None:
                say(f"{name} | {verdict.status.value} | {verdict.message[:300]}")
                continue
            floor = n * t.candidate.median_ms / 1e3
            goal = wall < 2 * floor + 0.5
            say(
                f"{name} ({task_id}) | {verdict.status.value} | {t.candidate.median_ms:.3f} | "
                f"{t.speedup:.4f} | {wall:.2f} | {floor:.2f} | {wall / floor:.2f} (goal < 2x + 0.5 s: {goal})"
            )
            cc, cal = verdict.details.get("crosscheck"), verdict.details.get("calibration")
            say(f"   stages {json.dumps(verdict.stage_wall_s)}; cross-check {cc}; calibration {cal}")
    finally:
        ev.settings = saved


def _recovery(ev) -> None:
    """Wall time of the next verdict after a hang, a crash and a sticky CUDA error (reduced protocol)."""
    from ptxgym.records.tasks import get_task

    task = get_task("Gemm-sm90a")
    saved = ev.settings
    ev.settings = saved.model_copy(update={"call_timeout_s": 5.0, "warmup": 2, "iterations": 10, "trials": 1})
    try:
        ev.settle()
        _, clean = _evaluate(ev, task, "naive")
        say(f"naive GEMM candidate, {_executions(ev.settings)} executions, after a clean one: {clean:.2f} s")
        for bad in ("hang", "exit_process", "illegal_address"):
            ev.settle()
            verdict, wall = _evaluate(ev, task, bad)
            nxt, nxt_wall = _evaluate(ev, task, "naive")
            say(
                f"after {bad}: its verdict {verdict.status.value} in {wall:.2f} s; next verdict "
                f"{nxt.status.value} in {nxt_wall:.2f} s (goal < 10 s: {nxt_wall < 10})"
            )
    finally:
        ev.settings = saved


def _ncu(ev) -> None:
    """Nsight Compute check wall time: a TMA candidate, and the cuBLAS / cuDNN baselines driven alike."""
    from ptxgym.audit.corpus import build_kernel
    from ptxgym.evaluation.trusted import ncu
    from ptxgym.evaluation.trusted.tools import ProofDirs, driver_argv
    from ptxgym.records.tasks import get_task

    for task_id, name in (("Gemm-sm90a", "tma_gemm"), ("Gemm-sm90a", None), ("MhaFwd-sm90a", None)):
        task = get_task(task_id)
        arena = ev._arena(task)
        dirs = ProofDirs.create()
        driver = None
        if name is None:
            name = task.baseline.function
            driver = driver_argv(
                arena.inputs_file(), None, "run", ev.device, "profile", name, arena.options, dirs.scratch
            )
        so = build_kernel(name) if driver is None else None
        t0 = time.perf_counter()
        try:
            got = ncu.check_executed(
                task.arch_spec,
                arena.inputs_file(),
                so,
                "run",
                ev.device,
                300,
                None,
                "bench",
                driver,
                task_flops=task.flops,
                dirs=dirs,
            )
        finally:
            dirs.remove()
        info = got.target
        say(
            f"ncu {name} ({task_id}): {info.executed.value} {info.counts} share {info.mma_share} "
            f"in {time.perf_counter() - t0:.1f} s "
            f"(ncu {got.wall_s:.1f} s; goal < 10 s) {info.message[:200]} {got.failed}"
        )
        if info.executed.value == "unknown":
            say(got.tail[-1500:])


def _stable_free(ev) -> int:
    """Free device memory once every spare is warm and two readings 0.5 s apart agree within 16 MiB."""
    import torch

    ev.settle()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    last = torch.cuda.mem_get_info(ev.device)[0]
    for _ in range(10):
        time.sleep(0.5)
        now = torch.cuda.mem_get_info(ev.device)[0]
        if abs(now - last) < 16 << 20:
            return now
        last = now
    return last


def _memory(ev, hostile: int, deadline: float) -> None:
    import torch

    from ptxgym.records.tasks import get_task

    task = get_task("Gemm-sm90a")
    saved = ev.settings
    ev.settings = saved.model_copy(update={"warmup": 2, "iterations": 5, "trials": 1, "call_timeout_s": 10.0})
    try:
        ev._arena(task)
        before = _stable_free(ev)
        counts: dict[str, int] = {}
        t0 = time.perf_counter()
        done = 0
        for i in range(hostile):
            if time.perf_counter() > deadline - 15:
                break
            verdict, _ = _evaluate(ev, task, CHEAP_HOSTILE[i % len(CHEAP_HOSTILE)])
            counts[verdict.status.value] = counts.get(verdict.status.value, 0) + 1
            done += 1
        elapsed = time.perf_counter() - t0
        after = _stable_free(ev)
        say(
            f"hostile candidates: {done} in {elapsed:.1f} s ({elapsed / max(done, 1):.2f} s each); "
            f"statuses {counts}"
        )
        say(
            f"GPU free memory before {before / 2**30:.3f} GiB, after {after / 2**30:.3f} GiB, "
            f"difference {(before - after) / 2**20:.1f} MiB; "
            f"trusted allocated {torch.cuda.memory_allocated() >> 20} MiB"
        )
        verdict, _ = _evaluate(ev, task, "naive")
        say(f"naive after the hostile run: {verdict.status.value}")
    finally:
        ev.settings = saved


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe")
    p.add_argument("out", type=Path)
    b = sub.add_parser("bench")
    b.add_argument("--hostile", type=int, default=100)
    b.add_argument("--budget-s", type=float, default=300.0)
    b.add_argument("--spares", type=int, default=6)
    b.add_argument("--tasks", default=",".join(TASKS))
    b.add_argument("--steps", default="baselines,candidates,recovery,ncu,memory")
    args = parser.parse_args(argv)
    if args.cmd == "probe":
        probe(args.out)
    else:
        tasks = tuple(t for t in args.tasks.split(",") if t)
        bench(args.hostile, args.budget_s, args.spares, tasks, set(args.steps.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
