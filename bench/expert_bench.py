"""Build, check and time the sm_90a expert solutions (knowledge_packs/sm90a/solutions) on an H200.

A standalone script (it does not need the team's evaluator): the CPU part compiles variants of an
expert source with nvcc; the GPU part loads each shared object with ``tvm_ffi.load_module`` in a fresh
subprocess (so a trapping kernel cannot poison the next one), checks it against an fp32 reference on
fresh random inputs with a NaN-poisoned output, and times it against ``torch.matmul`` (cuBLAS): CUDA
events, a 256 MB L2 flush before every call, 10 warm-ups then 50 timed calls per trial, 3 interleaved
trials, median over all timed calls. ``ncu`` mode proves that HGMMA / UTMALDG executed.

    python bench/expert_bench.py build [--out bench/build] [--variant NAME=-DFLAG=1,-DOTHER=2 ...]
    python bench/expert_bench.py run SO [SO ...] [--json FILE]          # GPU
    python bench/expert_bench.py ncu SO [--csv FILE]                    # GPU, Nsight Compute
    python bench/expert_bench.py evaluate [--json FILE]                  # GPU, ptxgym pipeline + evaluator
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "knowledge_packs" / "sm90a"
HEADERS = PACK / "headers"
# The shipped solution #includes the pack headers; every ptxgym build has them on its include path.
GEMM_SOURCE = GEMM_SHIPPED = PACK / "solutions" / "Gemm.cu"
M, N, K = 8192, 7168, 5120
ATOL = RTOL = 1e-2

# Variants tried on the GPU (flags on top of the defaults in Gemm.cu).
DEFAULT_VARIANTS = {
    "c2_s4": [],
    "c1_s4": ["-DGEMM_CLUSTER=1"],
    "c2_s4_t0": ["-DSM90_MBAR_TIMEOUT_NS=0"],
    "c2_s4_g4096": ["-DGEMM_GROUP_ROWS=4096"],
    "c2_s4_g1024": ["-DGEMM_GROUP_ROWS=1024"],
    "c2_s4_g512": ["-DGEMM_GROUP_ROWS=512"],
}


# ------------------------------------------------------------------------------------ sources


def nvcc_command(source: Path, out: Path, flags: list[str]) -> list[str]:
    """The DESIGN.md build line (static cudart here, so the .so runs on any host with a driver)."""
    from ptxgym.cpu.toolchain import find_toolchain

    tc = find_toolchain()
    return [
        str(tc.nvcc),
        "-O3",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-std=c++17",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-lineinfo",
        "-Xptxas",
        "-v",
        f"-I{tc.tvm_ffi_include}",
        f"-I{HEADERS}",
        *flags,
        str(source),
        "-o",
        str(out),
        f"-L{tc.tvm_ffi_lib_dir}",
        "-ltvm_ffi",
    ]


def build(out_dir: Path, variants: dict[str, list[str]]) -> int:
    """Compile every variant; print the ptxas resource line and the SASS families of each."""
    out_dir.mkdir(parents=True, exist_ok=True)
    failures = 0
    for name, flags in variants.items():
        so = out_dir / f"gemm_{name}.so"
        t0 = time.perf_counter()
        proc = subprocess.run(nvcc_command(GEMM_SOURCE, so, flags), capture_output=True, text=True)
        log = proc.stdout + proc.stderr
        res = [ln.strip() for ln in log.splitlines() if "registers" in ln or "spill" in ln or "C75" in ln]
        print(f"{name}: rc={proc.returncode} {time.perf_counter() - t0:.1f}s " + " | ".join(res))
        if proc.returncode != 0:
            failures += 1
            print(log[-3000:])
    return 1 if failures else 0


# ----------------------------------------------------------------------------------- GPU side


def _flush_l2(buf) -> None:  # noqa: ANN001 - torch tensor
    buf.zero_()


def _check(fn, torch, seed: int) -> dict:  # noqa: ANN001
    """One correctness set: fresh inputs, poisoned output, every element within atol or rtol."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    fn(a, b, c)
    torch.cuda.synchronize()
    ref = a.float() @ b.float().T
    out = c.float()
    err = (out - ref).abs()
    bad = ~((err <= ATOL) | (err <= RTOL * ref.abs()))
    nbad = int(bad.sum())
    rec = {
        "seed": seed,
        "nonfinite": int((~torch.isfinite(out)).sum()),
        "mismatches": nbad,
        "max_abs": float(torch.nan_to_num(err, nan=float("inf")).max()),
        "rel_norm": float(torch.linalg.norm(torch.nan_to_num(out - ref)) / torch.linalg.norm(ref)),
    }
    if nbad:
        idx = bad.nonzero()
        rec["first_bad"] = [int(idx[0, 0]), int(idx[0, 1])]
        rec["bad_rows_mod128"] = sorted({int(r) % 128 for r in idx[:4096, 0]})[:32]
        rec["bad_cols_mod256"] = sorted({int(x) % 256 for x in idx[:4096, 1]})[:32]
        rec["bad_row_tiles"] = len({int(r) // 128 for r in idx[:, 0]})
        rec["bad_col_tiles"] = len({int(x) // 256 for x in idx[:, 1]})
    return rec


def _time(call, torch, flush, iters: int, warmup: int) -> list[float]:  # noqa: ANN001
    """Per-call milliseconds with CUDA events, L2 flushed before each call."""
    for _ in range(warmup):
        flush()
        call()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends, strict=True):
        flush()
        s.record()
        call()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def worker(so: str) -> dict:
    """Check and time one shared object against cuBLAS; returns a JSON-able record."""
    import torch
    import tvm_ffi

    rec: dict = {"so": Path(so).name, "gpu": torch.cuda.get_device_name()}
    mod = tvm_ffi.load_module(so)
    fn = mod["run"]
    with tvm_ffi.use_torch_stream():
        rec["checks"] = [_check(fn, torch, seed) for seed in (1, 2, 3)]
        rec["correct"] = all(c["mismatches"] == 0 and c["nonfinite"] == 0 for c in rec["checks"])
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        flush_buf = torch.empty(64 * 1024 * 1024, device="cuda", dtype=torch.int32)
        flush = lambda: _flush_l2(flush_buf)  # noqa: E731
        cand, base = [], []
        for _ in range(3):  # interleaved trials
            cand += _time(lambda: fn(a, b, c), torch, flush, 50, 10)
            base += _time(lambda: torch.matmul(a, b.T), torch, flush, 50, 10)
        c.fill_(float("nan"))
        fn(a, b, c)
        torch.cuda.synchronize()
        ref = a.float() @ b.float().T
        err = (c.float() - ref).abs()
        rec["timed_output_ok"] = bool(((err <= ATOL) | (err <= RTOL * ref.abs())).all())
    flops = 2.0 * M * N * K
    rec["ms"] = statistics.median(cand)
    rec["ms_iqr"] = _iqr(cand)
    rec["cublas_ms"] = statistics.median(base)
    rec["cublas_iqr"] = _iqr(base)
    rec["speedup"] = rec["cublas_ms"] / rec["ms"]
    rec["tflops"] = flops / rec["ms"] / 1e9
    rec["cublas_tflops"] = flops / rec["cublas_ms"] / 1e9
    return rec


def _iqr(xs: list[float]) -> float:
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]


def run(sos: list[str], json_out: str | None, timeout_s: float) -> int:
    """Each .so in its own interpreter; a crash or hang is recorded, the rest still run."""
    results = []
    for so in sos:
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "worker", so], capture_output=True, text=True, timeout=timeout_s
            )
            line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
            rec = (
                json.loads(line)
                if line
                else {
                    "so": Path(so).name,
                    "error": f"rc={proc.returncode}",
                    "tail": (proc.stdout + proc.stderr)[-2000:],
                }
            )
        except subprocess.TimeoutExpired as exc:
            rec = {
                "so": Path(so).name,
                "error": f"timeout after {timeout_s}s",
                "tail": str(exc.stdout or "")[-1000:],
            }
        rec["wall_s"] = round(time.perf_counter() - t0, 1)
        results.append(rec)
        print(json.dumps(rec), flush=True)
    print(f"\n{'variant':28s} {'correct':8s} {'ms':>8s} {'cuBLAS':>8s} {'speedup':>8s} {'TFLOP/s':>8s}")
    for r in results:
        if "error" in r:
            print(f"{r['so']:28s} ERROR {r['error']}")
        else:
            print(
                f"{r['so']:28s} {str(r['correct'] and r['timed_output_ok']):8s} {r['ms']:8.4f} "
                f"{r['cublas_ms']:8.4f} {r['speedup']:8.3f} {r['tflops']:8.1f}"
            )
    if json_out:
        Path(json_out).write_text(json.dumps(results, indent=1))
    return 0


# ------------------------------------------------------------------------------------ ncu check


def ncu_driver(so: str) -> None:
    """One call of the candidate inside an NVTX range named 'candidate' (what ncu filters on)."""
    import torch
    import tvm_ffi

    fn = tvm_ffi.load_module(so)["run"]
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    with tvm_ffi.use_torch_stream():
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("candidate")
        fn(a, b, c)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


def ncu(so: str, csv_out: str | None) -> int:
    """Executed counts (predicate-true thread instructions) of the target SASS families."""
    cmd = [
        "ncu",
        "--clock-control",
        "none",
        "--nvtx",
        "--nvtx-include",
        "candidate/",
        "--metrics",
        "inst_executed,thread_inst_executed_true",
        "--page",
        "source",
        "--print-source",
        "sass",
        "--csv",
        sys.executable,
        __file__,
        "ncu-driver",
        so,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if csv_out:
        Path(csv_out).write_text(proc.stdout + proc.stderr)
    counts: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip().strip('"') for c in line.split('","')]
        if len(cells) < 4:
            continue
        tokens = cells[1].split()
        if tokens and tokens[0].startswith("@"):
            tokens = tokens[1:]
        family = tokens[0].split(".")[0] if tokens else ""
        if family in ("HGMMA", "UTMALDG", "UTMASTG"):
            try:
                counts[family] = counts.get(family, 0) + int(cells[3].replace(",", "").strip('"'))
            except ValueError:
                continue
    print(f"ncu rc={proc.returncode} executed thread-instruction counts: {counts}")
    if proc.returncode != 0:
        print((proc.stdout + proc.stderr)[-3000:])
    return 0 if counts.get("HGMMA", 0) > 0 and counts.get("UTMALDG", 0) > 0 else 1


# ------------------------------------------------------------------------- the team's evaluator


def evaluate_with_pipeline(
    source: Path = GEMM_SHIPPED, task_id: str = "Gemm-sm90a", memcheck: bool = False
) -> dict:
    """Run the shipped solution through ptxgym's own pipeline and LocalGpuEvaluator (GPU only).

    The action is the file in a fenced block, exactly as the reference policy sends it: extract ->
    policy -> build -> SASS -> run/check/time against the baseline -> ncu executed-instruction check.
    Memcheck is off by default (a full-size compute-sanitizer pass costs minutes of device time).
    """
    from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator
    from ptxgym.pipeline import Pipeline
    from ptxgym.records.tasks import get_task

    settings = EvalSettings(memcheck=MemcheckMode.FIRST_CORRECT if memcheck else MemcheckMode.NEVER)
    with LocalGpuEvaluator(settings=settings, spares=1) as evaluator:
        fb = Pipeline(get_task(task_id), evaluator).run(f"```cuda\n{source.read_text()}\n```")
    return feedback_summary(fb)


def feedback_summary(fb) -> dict:  # noqa: ANN001 - ptxgym.records.feedback.Feedback
    """The fields of a Feedback that the results file cites."""
    t, c, g = fb.timing, fb.correctness, fb.target
    return {
        "status": fb.status.value,
        "stage": fb.stage.value,
        "message": fb.message,
        "max_abs_error": c.max_abs_error if c else None,
        "rel_norm_error": c.rel_norm_error if c else None,
        "mismatch_ratio": c.mismatch_ratio if c else None,
        "calls_checked": c.calls_checked if c else None,
        "candidate_ms": t.candidate.median_ms if t and t.candidate else None,
        "candidate_iqr_ms": t.candidate.iqr_ms if t and t.candidate else None,
        "baseline_ms": t.baseline.median_ms if t and t.baseline else None,
        "baseline": t.baseline_name if t else None,
        "speedup": t.speedup if t else None,
        "timing_backend": t.backend if t else None,
        "sol_fraction": t.sol_fraction if t else None,
        "sm_clock_mhz": [t.sm_clock_mhz_before, t.sm_clock_mhz_after] if t else None,
        "target_executed": g.executed.value if g else None,
        "target_counts": g.counts if g else None,
        "gpu": fb.environment.gpu,
        "stage_wall_s": fb.stage_wall_s,
    }


# ------------------------------------------------------------------------------------------ CLI


def main(argv: list[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", default=str(ROOT / "bench" / "build"))
    b.add_argument("--variant", action="append", default=[], help="NAME=-DFLAG=1,-DOTHER=2")
    r = sub.add_parser("run")
    r.add_argument("so", nargs="+")
    r.add_argument("--json")
    r.add_argument("--timeout", type=float, default=180.0)
    w = sub.add_parser("worker")
    w.add_argument("so")
    n = sub.add_parser("ncu")
    n.add_argument("so")
    n.add_argument("--csv")
    d = sub.add_parser("ncu-driver")
    d.add_argument("so")
    e = sub.add_parser("evaluate", help="the shipped Gemm.cu through ptxgym's pipeline + LocalGpuEvaluator")
    e.add_argument("--json")
    e.add_argument("--memcheck", action="store_true")
    f = sub.add_parser("flags", help="print the nvcc flags of a named variant")
    f.add_argument("name")
    args = p.parse_args(argv)
    if args.cmd == "build":
        variants = dict(DEFAULT_VARIANTS)
        if args.variant:
            pairs = [v.split("=", 1) for v in args.variant]
            variants = {name: [f for f in flags.split(",") if f] for name, flags in pairs}
        return build(Path(args.out), variants)
    if args.cmd == "run":
        return run(args.so, args.json, args.timeout)
    if args.cmd == "worker":
        print(json.dumps(worker(args.so)), flush=True)
        return 0
    if args.cmd == "ncu":
        return ncu(args.so, args.csv)
    if args.cmd == "evaluate":
        summary = evaluate_with_pipeline(memcheck=args.memcheck)
        print(json.dumps(summary, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=1))
        return 0 if summary["status"] == "PASSED" else 1
    if args.cmd == "flags":
        print(" ".join(DEFAULT_VARIANTS.get(args.name, [])))
        return 0
    if args.cmd == "ncu-driver":
        ncu_driver(args.so)
        return 0
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
