"""In-band executed counts per SASS instruction (CUPTI SASS metrics, ``sandboxed/sass_counts.py``).

For the shipped expert GEMM and the SIMT control (``naive``) on the GEMM workload (8192x7168x5120), and for a
cuBLAS bf16 GEMM of the same size: one call counted in this process, the counts joined with the module's
SASS listing (offset -> opcode), then the target rows (HGMMA, UTMALDG ...), the MMA work share
(``target_work.work_share``) and the wall time of the counted call. Nsight Compute measured the expert's
HGMMA at 146,800,640 predicate-true threads (4,587,520 warp instructions) per call
(bench/results/expert_gemm.txt): the in-band counts must agree.

Usage: python bench/sass_counts_probe.py [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections import defaultdict
from pathlib import Path

NCU_EXPERT_HGMMA_THREADS = 146_800_640


def build(name: str) -> Path:
    """The built .so of the expert GEMM (``Gemm``) or of a corpus kernel."""
    from ptxgym.audit.corpus import build_kernel
    from ptxgym.cpu.build import build_solution
    from ptxgym.knowledge_packs.include_tree import pack_include_dirs
    from ptxgym.knowledge_packs.variants import PACK_ROOT
    from ptxgym.records.schema import Solution
    from ptxgym.records.tasks import get_task

    if name != "Gemm":
        return build_kernel(name)
    task = get_task("Gemm-sm90a")
    source = (PACK_ROOT / "sm90a" / "solutions" / "Gemm.cu").read_text()
    solution = Solution.from_cuda_source(source, task.definition.name, arch=task.arch)
    built = build_solution(solution, task.arch_spec, include_dirs=pack_include_dirs(task.arch))
    if built.so_path is None:
        raise SystemExit(f"expert build failed: {built.message}")
    return built.so_path


def _synced(fn, *args, **kw) -> None:
    import torch

    fn(*args, **kw)
    torch.cuda.synchronize()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    args = p.parse_args()

    import torch
    import tvm_ffi

    from ptxgym.cpu.sass import dump_sass, pc_opcodes
    from ptxgym.cpu.toolchain import find_toolchain
    from ptxgym.evaluation.sandboxed.sass_counts import SassCounter
    from ptxgym.evaluation.trusted.target_work import work_share
    from ptxgym.records.arch import HOPPER

    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    torch.cuda.init()
    M, N, K = 8192, 7168, 5120
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * M * N * K
    say(
        f"# SASS counts probe, {datetime.date.today()}, {torch.cuda.get_device_name()}, "
        f"torch {torch.__version__}"
    )
    t0 = time.perf_counter()
    counter = SassCounter(torch.cuda.current_device())
    say(
        f"# SassCounter set up in {time.perf_counter() - t0:.2f} s: chip {counter.chip!r}, "
        f"metrics {counter.metrics}"
    )
    say(
        f"# {len(counter.available)} SASS metrics available; instruction ones: "
        + ", ".join(sorted(n for n in counter.available if "inst_executed" in n))
    )
    for name in ("Gemm", "naive"):
        so = build(name)
        pcs = pc_opcodes(dump_sass(so, find_toolchain()))
        fn = tvm_ffi.load_module(str(so))["run"]
        fn(a, b, c)
        torch.cuda.synchronize()
        ref = (a.float() @ b.float().T).to(torch.bfloat16)
        t0 = time.perf_counter()
        counts = counter.count(lambda fn=fn: _synced(fn, a, b, c))
        wall = time.perf_counter() - t0
        err = (c.float() - ref.float()).abs().max().item()
        rows: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
        unmatched = 0
        for r in counts:
            opcode = pcs.get(r.function, {}).get(r.pc_offset)
            if opcode is None:
                unmatched += 1
                continue
            inst = r.values.get("inst_executed", 0)
            rows[opcode][0] += inst
            rows[opcode][1] += r.values.get("thread_inst_executed_true", inst * 32)
        share = work_share(((op, i, t) for op, (i, t) in rows.items()), HOPPER, flops)
        say(
            f"{name}: counted call {wall * 1e3:.1f} ms, max abs error {err:.3g}, "
            f"{len(counts)} instruction records ({unmatched} not in the SASS listing), "
            f"functions {sorted({r.function for r in counts})}"
        )
        for op, (inst, threads) in sorted(rows.items()):
            if HOPPER.is_target_opcode(op):
                say(f"  {op}: inst_executed {inst:,}  thread_inst_executed_true {threads:,}")
        say(
            f"  MMA share {share.mma_share}, work {share.work.value}; total inst_executed "
            f"{sum(i for i, _ in rows.values()):,}"
        )
        if name == "Gemm":
            hg = sum(t for op, (_, t) in rows.items() if op.startswith("HGMMA"))
            say(
                f"  HGMMA threads in band {hg:,} vs Nsight Compute {NCU_EXPERT_HGMMA_THREADS:,}: "
                f"ratio {hg / NCU_EXPERT_HGMMA_THREADS:.4f}"
            )
    t0 = time.perf_counter()
    counts = counter.count(lambda: _synced(torch.matmul, a, b.T, out=c))
    say(
        f"cublas: counted call {(time.perf_counter() - t0) * 1e3:.1f} ms, {len(counts)} records, functions "
        f"{sorted({r.function for r in counts})[:3]}"
    )
    counter.close()
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
