"""Running the NVIDIA command-line tools (ncu, compute-sanitizer) on a one-shot driver process.

Both tools run the candidate in a fresh process of their own (``driver.py``); the whole process group
is killed on timeout, so a hanging candidate cannot outlive its check.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ToolRun:
    """Outcome of one tool invocation."""

    returncode: int | None
    output: str
    timed_out: bool
    wall_s: float


def find_tool(name: str) -> str | None:
    """Absolute path of ``ncu`` or ``compute-sanitizer`` (PATH, CUDA toolkit, Nsight Compute installs)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = [
        f"/usr/local/cuda/bin/{name}",
        *sorted(glob.glob(f"/opt/nvidia/nsight-compute/*/{name}")),
        f"/usr/local/cuda/compute-sanitizer/{name}",
    ]
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def driver_argv(
    inputs: Path,
    so_path: Path | None,
    entry: str,
    device: int,
    mode: str,
    baseline: str | None = None,
    options: dict | None = None,
) -> list[str]:
    """The driver command line a tool wraps (a candidate's .so, or a baseline function by name)."""
    import json

    target = (
        ["--so", str(so_path)]
        if baseline is None
        else ["--baseline", baseline, "--options", json.dumps(options or {})]
    )
    return [
        sys.executable,
        "-m",
        "ptxgym.evaluation.sandboxed.driver",
        "--inputs",
        str(inputs),
        *target,
        "--entry",
        entry,
        "--device",
        str(device),
        "--mode",
        mode,
    ]


def run_tool(argv: list[str], timeout_s: float, env: dict[str, str] | None = None) -> ToolRun:
    """Run a tool with stdout+stderr captured, killing its process group on timeout.

    The working directory is the temp directory, so a source checkout in the caller's directory cannot
    shadow the installed package in the driver.
    """
    import tempfile
    import time

    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
        timed_out = True
    text = out.decode(errors="replace") if out else ""
    return ToolRun(None if timed_out else proc.returncode, text, timed_out, time.perf_counter() - t0)
