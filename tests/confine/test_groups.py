"""Ending a process group (``confine/groups.py``): signalled at once, or signalled and reaped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ptxgym.confine.groups import group_running, kill_group, signal_group

# a leader that starts a child in its group, then both sleep
TREE = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
)


def _tree() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(_members(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(_members(proc.pid)) == 2
    return proc


def _members(pgid: int) -> list[int]:
    """The live members of a process group, read from /proc as ``group_running`` does."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            found.append(int(pid))
    return found


def test_signal_group_returns_at_once_and_every_member_dies():
    proc = _tree()
    t = time.perf_counter()
    signal_group(proc)
    assert time.perf_counter() - t < 0.05  # no waiting
    deadline = time.monotonic() + 10
    while group_running(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not group_running(proc.pid)  # the child too, not only the leader
    assert kill_group(proc, grace_s=5.0)  # then reaped; a second SIGKILL to a dead group is harmless
    assert proc.returncode == -9


def test_kill_group_waits_until_no_member_runs():
    proc = _tree()
    assert kill_group(proc, grace_s=5.0)
    assert not group_running(proc.pid) and proc.returncode == -9
    signal_group(proc)  # an ended group: no error
