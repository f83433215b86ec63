"""Where a cold build's CPU goes: the evaluator's interpreter against its child processes (nvcc and tools).

    python bench/build_cpu.py --repeats 3 --out bench/results/build_cpu.txt

Concurrent builds run on threads of one process (``pipeline.build_workers``), so the interpreter's share
of a build (the source screen, the backstop's scans of nvcc's intermediates, the log filter) is held
under one lock that every build shares, while the children's share spreads over the host's cores. Each
repeat builds a distinct naive-GEMM variant of ``bench/throughput.py`` (so the build cache misses) twice
side by side: with the backstop's translation scan as shipped (``host_asm._may_match`` skipping lines
that hold none of its patterns' words) and with that test off (every line through the expressions, as
before 2026-12-05). Prints the median wall, interpreter CPU and children CPU of each.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import time
from pathlib import Path

from provenance import commit
from throughput import candidate

from ptxgym.cpu import host_asm
from ptxgym.pipeline import Pipeline, Submission
from ptxgym.records.tasks import get_task


def cpu() -> tuple[float, float]:
    """(this process's CPU seconds, its finished children's)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def one_build(pipeline: Pipeline, tag: str) -> tuple[float, float, float]:
    """(wall, interpreter CPU, children CPU) seconds of one cold build."""
    text = candidate("slow", random.randrange(10**9), tag)
    (s0, c0), t0 = cpu(), time.perf_counter()
    prepared = pipeline.prepare(Submission(text))
    (s1, c1), wall = cpu(), time.perf_counter() - t0
    if prepared.candidate is None:
        raise SystemExit(f"the variant did not build: {prepared.feedback.status.value}")
    return wall, s1 - s0, c1 - c0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    pipeline = Pipeline(get_task("Gemm-sm90a"))
    shipped = host_asm._may_match
    rows: dict[str, list[tuple[float, float, float]]] = {"prefilter": [], "no prefilter": []}
    for r in range(args.repeats):
        for mode in rows:
            host_asm._may_match = shipped if mode == "prefilter" else (lambda line: True)
            tag = f"cpu{r}_{mode.replace(' ', '_')}_{random.randrange(10**9)}"
            rows[mode].append(one_build(pipeline, tag))
    host_asm._may_match = shipped
    lines = [
        f"# bench/build_cpu.py --repeats {args.repeats}, {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, "
        f"commit {commit()}, this CPU host; medians of distinct cold builds of the naive GEMM variant",
        "scan         | wall s | interpreter CPU s | children CPU s",
    ]
    for mode, got in rows.items():
        wall, me, kids = (statistics.median(x[k] for x in got) for k in range(3))
        lines.append(f"{mode:12s} | {wall:6.2f} | {me:17.2f} | {kids:14.2f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
