"""Where a cold build's CPU goes: the evaluator's interpreter against its child processes (nvcc and tools).

    python bench/build_cpu.py --repeats 3 --out bench/results/build_cpu.txt

Concurrent builds run on threads of one process (``pipeline.build_workers``), so the interpreter's share
of a build (the source screen, the backstop's scans of nvcc's intermediates, the log filter) is held
under one lock that every build shares (and that the local evaluator's timing thread needs: see
``ptxgym/cpu/scan_helpers.py``), while the children's share spreads over the host's cores. Each repeat
builds a distinct naive-GEMM variant of ``bench/throughput.py`` (so the build cache misses) three times
side by side: as shipped (the backstop's scan in the helper processes, ``scan_helpers.py``), with the
scan in this process (``PTXGYM_SCAN_HELPERS=0``, as before 2026-12-05's sixteenth session), and in this
process without the scan's line prefilter (``host_asm._may_match`` off: every line through the
expressions, as before the prefilter). Prints the median wall, interpreter CPU, children CPU (nvcc and
its tools) and helpers' CPU (the long-lived scan helpers, read from ``/proc``) of each.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import time
from pathlib import Path

from provenance import commit
from throughput import candidate

from ptxgym.cpu import host_asm, scan_helpers
from ptxgym.pipeline import Pipeline, Submission
from ptxgym.records.tasks import get_task


def cpu() -> tuple[float, float]:
    """(this process's CPU seconds, its finished children's)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def helpers_cpu() -> float:
    """CPU seconds of this process's live scan helpers (``/proc/<pid>/stat``: utime + stime)."""
    pool = scan_helpers._pool
    if pool is None:
        return 0.0
    total = 0.0
    for pid in pool.pids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def one_build(pipeline: Pipeline, tag: str) -> tuple[float, float, float, float]:
    """(wall, interpreter CPU, children CPU, helpers' CPU) seconds of one cold build."""
    text = candidate("slow", random.randrange(10**9), tag)
    (s0, c0), h0, t0 = cpu(), helpers_cpu(), time.perf_counter()
    prepared = pipeline.prepare(Submission(text))
    (s1, c1), wall = cpu(), time.perf_counter() - t0
    h1 = helpers_cpu()
    if prepared.candidate is None:
        raise SystemExit(f"the variant did not build: {prepared.feedback.status.value}")
    return wall, s1 - s0, c1 - c0, h1 - h0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    pipeline = Pipeline(get_task("Gemm-sm90a"))
    shipped = host_asm._may_match
    rows: dict[str, list[tuple[float, float, float, float]]] = {
        "helpers": [],
        "in-process": [],
        "in-process, no prefilter": [],
    }
    pipeline.prepare(Submission(candidate("slow", random.randrange(10**9), "warm")))  # helpers started
    for r in range(args.repeats):
        for mode in rows:
            os.environ["PTXGYM_SCAN_HELPERS"] = "" if mode == "helpers" else "0"
            host_asm._may_match = (lambda line: True) if "no prefilter" in mode else shipped
            tag = f"cpu{r}_{''.join(c if c.isalnum() else '_' for c in mode)}_{random.randrange(10**9)}"
            rows[mode].append(one_build(pipeline, tag))
    host_asm._may_match = shipped
    os.environ.pop("PTXGYM_SCAN_HELPERS", None)
    lines = [
        f"# bench/build_cpu.py --repeats {args.repeats}, {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, "
        f"commit {commit()}, this CPU host; medians of distinct cold builds of the naive GEMM variant",
        "scan                     | wall s | interpreter CPU s | children CPU s | helpers CPU s",
    ]
    for mode, got in rows.items():
        wall, me, kids, helpers = (statistics.median(x[k] for x in got) for k in range(4))
        lines.append(f"{mode:24s} | {wall:6.2f} | {me:17.2f} | {kids:14.2f} | {helpers:13.2f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
