"""Memory safety: compute-sanitizer memcheck over one call on the task's real workload.

The driver runs with torch's caching allocator off (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``), so every
input and output is its own allocation and an access past any of them is reported, not absorbed by a
neighbouring block of the same segment. It runs sandboxed, with the worker's scrubbed environment
(``tools.tool_environ``), and the tool writes its report with ``--log-file`` into a directory the
candidate cannot write (``tools.ProofDirs``); only that file is parsed, never the candidate's output
(issue 11 item 3: a candidate printed a sanitizer-shaped error carrying a secret and exited with the
tool's error code). The first error block of the report becomes the MEMORY_ERROR message.

Outcome (``memcheck_info``): errors counted in the report: clean False (MEMORY_ERROR). The report's
summary says 0 errors and the tool exited 0: clean True. Anything else (a timeout, no report, no summary,
a non-zero exit with a clean summary, e.g. a candidate that exits with the tool's error code): clean None,
which the evaluator turns into PROOF_FAILED, never PASSED.
"""

from __future__ import annotations

import re
from pathlib import Path

from ptxgym.evaluation.trusted.tools import (
    Gate,
    ProofDirs,
    ToolRun,
    driver_argv,
    find_tool,
    read_report,
    run_tool,
    tool_environ,
)
from ptxgym.records.feedback import MemcheckInfo

REPORT = "memcheck.txt"
"""The tool's report file in ``ProofDirs.report`` (``--log-file``): the only text parsed."""
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


def memcheck_argv(tool: str, log_file: Path, driver: list[str]) -> list[str]:
    """The compute-sanitizer command over a driver command, its report to ``log_file``."""
    return [
        tool,
        "--tool",
        "memcheck",
        "--error-exitcode",
        str(_EXIT_ON_ERROR),
        "--print-limit",
        "20",
        "--log-file",
        str(log_file),
        *driver,
    ]


def memcheck_info(report: str | None, run: ToolRun, timeout_s: float) -> MemcheckInfo:
    """The verdict from the tool's own report file and its exit (module docstring); ``run.output`` unused."""
    if run.timed_out:
        return MemcheckInfo(ran=True, clean=None, first_error=f"memcheck timed out after {timeout_s:.0f} s")
    if not report:
        return MemcheckInfo(
            ran=True,
            clean=None,
            first_error=f"compute-sanitizer wrote no report (exit {run.returncode}): the candidate's process "
            "ended before the tool could report",
        )
    count = error_count(report)
    if count is not None and count > 0:
        return MemcheckInfo(ran=True, clean=False, first_error=first_error(report) or report[-800:])
    if count == 0 and run.returncode == 0:
        return MemcheckInfo(ran=True, clean=True)
    summary = "no error summary" if count is None else "a clean summary"
    return MemcheckInfo(
        ran=True,
        clean=None,
        first_error=f"compute-sanitizer could not complete (exit {run.returncode}, {summary} in its report)",
    )


def run_memcheck(
    inputs: Path,
    so_path: Path,
    entry: str,
    device: int,
    timeout_s: float,
    dirs: ProofDirs | None = None,
    sandbox: str = "on",
    gate: Gate | None = None,
) -> tuple[MemcheckInfo, float, str]:
    """Run memcheck once, sandboxed, in ``dirs`` (or fresh ones); with ``gate``, its start-up holds no GPU.

    Returns the info, the wall seconds and the tail of the run's output (a log, never parsed).
    """
    tool = find_tool("compute-sanitizer")
    if tool is None:
        return MemcheckInfo(ran=False, first_error="compute-sanitizer is not installed here"), 0.0, ""
    own = dirs or ProofDirs.create()
    try:
        log_file = own.report / REPORT
        log_file.unlink(missing_ok=True)
        driver = driver_argv(
            inputs, so_path, entry, device, "memcheck", scratch=own.scratch, sandbox=sandbox, gate=gate
        )
        env = tool_environ(own.scratch, {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
        argv = memcheck_argv(tool, log_file, driver)
        run = run_tool(argv, timeout_s, env, own.scratch, gate, read=lambda *_: read_report(log_file))
        info = memcheck_info(run.read, run, timeout_s)
    finally:
        if dirs is None:
            own.remove()
    return info, run.wall_s, run.output[-4000:]
