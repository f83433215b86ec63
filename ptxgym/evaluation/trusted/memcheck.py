"""Memory safety: compute-sanitizer memcheck over one call on the task's real workload.

The driver runs with torch's caching allocator off (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``), so every
input and output is its own allocation and an access past any of them is reported, not absorbed by a
neighbouring block of the same segment. The first error block of the tool's report becomes the
MEMORY_ERROR message.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ptxgym.evaluation.trusted.tools import driver_argv, find_tool, run_tool
from ptxgym.records.feedback import MemcheckInfo

_EXIT_ON_ERROR = 86
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
_PREFIX = "========="


def first_error(text: str, max_lines: int = 14) -> str | None:
    """The first error block of a compute-sanitizer report (None if it reports no error)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        body = line.removeprefix(_PREFIX).strip()
        if (
            not line.startswith(_PREFIX)
            or not body
            or body.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY"))
        ):
            continue
        block = [body]
        for nxt in lines[i + 1 : i + max_lines]:
            nbody = nxt.removeprefix(_PREFIX).strip()
            if (
                not nxt.startswith(_PREFIX)
                or not nbody
                or nbody.startswith(("Saved host backtrace", "Host Frame"))
            ):
                break
            block.append(nbody)
        return "\n".join(block)
    return None


def error_count(text: str) -> int | None:
    """Errors counted in the report's summary line (None if absent)."""
    match = _SUMMARY.search(text)
    return int(match.group(1)) if match else None


def run_memcheck(
    inputs: Path, so_path: Path, entry: str, device: int, timeout_s: float
) -> tuple[MemcheckInfo, float, str]:
    """Run memcheck once; returns the info, wall seconds and the output tail."""
    tool = find_tool("compute-sanitizer")
    if tool is None:
        return MemcheckInfo(ran=False, first_error="compute-sanitizer is not installed here"), 0.0, ""
    argv = [
        tool,
        "--tool",
        "memcheck",
        "--error-exitcode",
        str(_EXIT_ON_ERROR),
        "--print-limit",
        "20",
        *driver_argv(inputs, so_path, entry, device, "memcheck"),
    ]
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    run = run_tool(argv, timeout_s, env)
    tail = run.output[-4000:]
    if run.timed_out:
        return (
            MemcheckInfo(ran=True, clean=None, first_error=f"memcheck timed out after {timeout_s:.0f} s"),
            run.wall_s,
            tail,
        )
    count = error_count(run.output)
    if run.returncode == _EXIT_ON_ERROR or (count or 0) > 0:
        return (
            MemcheckInfo(ran=True, clean=False, first_error=first_error(run.output) or tail[-800:]),
            run.wall_s,
            tail,
        )
    if run.returncode == 0 and count == 0:
        return MemcheckInfo(ran=True, clean=True), run.wall_s, tail
    return (
        MemcheckInfo(
            ran=True,
            clean=None,
            first_error=f"compute-sanitizer could not complete (exit {run.returncode}): {tail[-600:]}",
        ),
        run.wall_s,
        tail,
    )
