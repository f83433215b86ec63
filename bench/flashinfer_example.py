"""FlashInfer-Bench's example solution, unchanged, through ptxgym's public API at several values of M.

The example (``examples/ffi/Example-FlashInfer-Trace`` of the flashinfer-bench repository: a
``gemm_n4096_k4096`` definition, its workloads and ``example_agent_solution.json``, a WMMA kernel written
for B200) is not part of this repository: pass the folder with ``--dataset``. For each M the script makes
``gymnasium.make("ptxgym/Trace-v0", dataset=DIR, task="gemm_n4096_k4096@sm_90a")``, resets it to the
workload with that M, steps it with the Solution record as read from disk, and prints the verdict.

Usage: python bench/flashinfer_example.py --dataset DIR [--m 256 2053 8192] [--evaluator local] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

import gymnasium

import ptxgym.envs  # noqa: F401  (registers the ids)
from ptxgym.records.schema import Solution


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True, type=Path)
    p.add_argument("--solution", default="solutions/example_agent_solution.json")
    p.add_argument("--task", default="gemm_n4096_k4096@sm_90a")
    p.add_argument("--m", type=int, nargs="+", default=[256, 2053, 8192])
    p.add_argument("--evaluator", default="local")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    solution = Solution.from_json((args.dataset / args.solution).read_text())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    lines = [
        f"# FlashInfer-Bench example solution through ptxgym, {datetime.date.today()}, commit "
        f"{commit.strip() or 'unknown'}, evaluator {args.evaluator}",
        f"# solution {solution.name} (entry {solution.spec.entry_point}), task {args.task}",
        "# M  status  latency_ms  baseline_ms  speedup  target  message",
    ]
    print("\n".join(lines), flush=True)
    env = gymnasium.make("ptxgym/Trace-v0", dataset=args.dataset, task=args.task, evaluator=args.evaluator)
    try:
        for m in args.m:
            env.reset(seed=0, options={"workload": {"M": m}})
            _, _, _, _, info = env.step(solution)
            fb = info["feedback"]
            t = fb.timing
            cand = t.candidate.median_ms if t and t.candidate else float("nan")
            base = t.baseline.median_ms if t and t.baseline else float("nan")
            speedup = t.speedup if t and t.speedup is not None else float("nan")
            tgt = fb.target.executed.value if fb.target else "-"
            row = f"{m:5d}  {fb.status.value}  {cand:.4f}  {base:.4f}  {speedup:.3f}  {tgt}  "
            row += fb.message[:160]
            print(row, flush=True)
            lines.append(row)
    finally:
        env.close()
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
