"""Ending a process group: SIGKILL every member and wait, bounded, until none is still running.

Builds (``cpu/jail.py``) and proof runs (``evaluation/trusted/tools.py``) start their program as the
leader of a new process group, and the jails refuse ``setsid``/``setpgid`` (``seccomp.py``), so the group
holds everything the program started. Waiting for the members matters: a process killed with the GPU
in use is still tearing its CUDA context down for a moment, and nothing may run beside a later timing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def group_running(pgid: int) -> bool:
    """Whether a live (non-zombie) process of the group remains, read from /proc."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def signal_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s whole process group and return at once: no member runs host code after this."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> bool:
    """SIGKILL ``proc``'s whole process group, reap ``proc``, wait until no member runs: True if none does.

    Bounded by ``grace_s`` in all (a process stuck in a driver call can take long to die; the caller goes
    on, and a later ``wait`` reaps it).
    """
    signal_group(proc)
    deadline = time.monotonic() + grace_s
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        return False
    while group_running(proc.pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
