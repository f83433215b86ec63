"""Running the NVIDIA command-line tools (ncu, compute-sanitizer) on a one-shot, sandboxed driver process.

Both tools run the candidate in a fresh process of their own (``driver.py``); the whole process group
is killed on timeout, so a hanging candidate cannot outlive its check.

What a tool says is read only from the report the tool itself writes through its own output option
(``ncu --export`` read back with ``--import ... --log-file``, ``compute-sanitizer --log-file``), into
``ProofDirs.report``: a directory the candidate cannot write, because the driver applies the host sandbox
(``sandbox.py``: writes only beneath ``ProofDirs.scratch``) before it loads the candidate. The combined
stdout/stderr of a run carries the candidate's own output too: it is kept (capped) as a log tail and
never parsed as proof. The tools run with the worker's scrubbed environment (``worker_environ``: no
credential-like variables, TMPDIR and CUDA's cache in the candidate's scratch).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ptxgym.evaluation.protocol import worker_environ

OUTPUT_TAIL_BYTES = 64 << 10
"""How much of a tool run's combined stdout/stderr is kept (the end); the rest is dropped unread."""
MAX_REPORT_BYTES = 64 << 20
"""A report file larger than this is not read (the tool never writes one that large for one call)."""


@dataclass(frozen=True)
class ToolRun:
    """Outcome of one tool invocation."""

    returncode: int | None
    output: str
    """The last ``OUTPUT_TAIL_BYTES`` of stdout and stderr together (candidate output included: a log,
    never a proof)."""
    timed_out: bool
    wall_s: float


@dataclass(frozen=True)
class ProofDirs:
    """The directories of one proof run, under a fresh private root.

    ``report`` receives the tool's report, written by the tool's front end; ``scratch`` is the only place
    the sandboxed driver (and so the candidate) may write. They are siblings, so the candidate cannot
    write a report.
    """

    root: Path

    @property
    def report(self) -> Path:
        """Where the tool writes its report."""
        return self.root / "report"

    @property
    def scratch(self) -> Path:
        """The driver's sandbox scratch directory (cwd, TMPDIR, CUDA cache)."""
        return self.root / "candidate"

    @classmethod
    def create(cls, parent: Path | None = None) -> ProofDirs:
        """A new root (mode 0700) with both directories."""
        root = Path(tempfile.mkdtemp(prefix="ptxgym-proof-", dir=parent))
        dirs = cls(root)
        dirs.report.mkdir(mode=0o700)
        dirs.scratch.mkdir(mode=0o700)
        return dirs

    def remove(self) -> None:
        """Delete the root and everything under it."""
        shutil.rmtree(self.root, ignore_errors=True)


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
    scratch: Path | None = None,
    sandbox: str = "on",
) -> list[str]:
    """The driver command line a tool wraps (a candidate's .so, or a baseline function by name).

    With ``scratch`` the driver applies the host sandbox (mode ``sandbox``) before loading the target.
    """
    target = (
        ["--so", str(so_path)]
        if baseline is None
        else ["--baseline", baseline, "--options", json.dumps(options or {})]
    )
    confine = ["--scratch", str(scratch), "--sandbox", sandbox] if scratch is not None else []
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
        *confine,
    ]


def tool_environ(scratch: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a tool run: the worker's scrubbed one (``worker_environ``) plus ``extra``."""
    return {**worker_environ(os.environ, scratch), **(extra or {})}


def read_report(path: Path) -> str | None:
    """The text of a report file the tool wrote, or None if there is none (or it is absurdly large)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_REPORT_BYTES:
            return None
        return path.read_text(errors="replace")
    except OSError:
        return None


def run_tool(
    argv: list[str], timeout_s: float, env: dict[str, str] | None = None, cwd: Path | None = None
) -> ToolRun:
    """Run a tool, its stdout+stderr to a private temporary file, killing its process group on timeout.

    The working directory defaults to the temp directory, so a source checkout in the caller's
    directory cannot shadow the installed package in the driver. Only the tail of the output is read.
    """
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            cwd=str(cwd) if cwd is not None else tempfile.gettempdir(),
        )
        try:
            proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            timed_out = True
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - OUTPUT_TAIL_BYTES))
        text = out.read().decode(errors="replace")
    return ToolRun(None if timed_out else proc.returncode, text, timed_out, time.perf_counter() - t0)
