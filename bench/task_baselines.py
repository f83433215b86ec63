"""Baseline latency and throughput of every catalog task of one architecture, measured on this GPU.

For each task (its default workload, or every workload with --all-workloads) the local GPU evaluator
checks and times the task's baseline through its worker (``LocalGpuEvaluator.measure_baseline``), and
the script prints the median latency, TFLOP/s (task FLOPs / latency) and GB/s (the task's minimal bytes /
latency), then the number of tasks per family. The disk cache is not read: every figure is measured in
this run. A baseline with a fallback (FlashInfer's GQA baselines: the torch reference) gets a second line
for the fallback, so both latencies are recorded side by side; where the library is missing or fails,
the first line is the fallback already and says why.

Usage: python bench/task_baselines.py [--arch sm_90a] [--iterations 20] [--trials 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import subprocess
import sys
import time
from pathlib import Path

from ptxgym.evaluation.trusted.base import EvalSettings
from ptxgym.evaluation.trusted.baseline_store import with_fallback
from ptxgym.records.tasks import catalog


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--all-workloads", action="store_true")
    p.add_argument("--only", nargs="*", help="task names (without the arch) to measure")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)

    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    tasks = [t for t in catalog().values() if str(t.arch) == args.arch]
    if args.only:
        tasks = [t for t in tasks if t.name in args.only]
    settings = EvalSettings(
        iterations=args.iterations, trials=args.trials, correctness_sets=1, baseline_from_disk=False
    )
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    with LocalGpuEvaluator(settings=settings) as ev:
        say(
            f"# task baselines, {datetime.date.today()}, {ev.facts.name}, "
            f"commit {commit.strip() or 'unknown'}, "
            f"{args.iterations} timed calls x {args.trials} trials (median), L2 flushed before each call"
        )
        say("# task  workload  baseline  median_ms  iqr_ms  TFLOP/s  GB/s  correct  wall_s  message")
        families: collections.Counter[str] = collections.Counter()
        for task in tasks:
            families[task.family] += 1
            for wl in task.family_workloads if args.all_workloads else (task.workload,):
                t = task.with_workload(wl)
                axes = ",".join(f"{k}={v}" for k, v in sorted(t.workload.axes.items()))
                ran: set[str] = set()
                for subject in (t, with_fallback(t)) if t.baseline.fallback else (t,):
                    if subject.baseline.function in ran:
                        continue  # the named baseline's fallback ran already in its place
                    t0 = time.perf_counter()
                    rec = ev.measure_baseline(subject)
                    ran.add(rec.function)
                    wall = time.perf_counter() - t0
                    ms = rec.stats.median_ms if rec.stats else float("nan")
                    iqr = rec.stats.iqr_ms if rec.stats else float("nan")
                    tflops = t.flops / (ms * 1e-3) / 1e12 if rec.stats else float("nan")
                    gbs = t.min_bytes / (ms * 1e-3) / 1e9 if rec.stats and t.min_bytes else float("nan")
                    say(
                        f"{t.id}  {axes}  {rec.name}  {ms:.4f}  {iqr:.4f}  {tflops:.1f}  {gbs:.0f}  "
                        f"{rec.correct}  {wall:.1f}  {(rec.fallback + ' ' + rec.message).strip()[:200]}"
                    )
        say("# tasks per family: " + ", ".join(f"{f} {n}" for f, n in sorted(families.items())))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
