"""``ptxgym.confine.tasks``: the facts RLIMIT_NPROC's cap is built from."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from ptxgym.confine.tasks import privileged, user_tasks

UNUSED_UID = 2**31 - 9


def test_no_tasks_for_a_uid_nobody_uses() -> None:
    assert user_tasks(UNUSED_UID) == 0


@pytest.mark.skipif(os.getuid() != 0, reason="starting a process under another uid needs root")
def test_user_tasks_counts_the_processes_of_a_uid() -> None:
    """A sleeping child under an otherwise unused uid: exactly one task for that uid."""
    child = subprocess.Popen(["sleep", "30"], user=UNUSED_UID)
    try:
        deadline = time.monotonic() + 10
        while user_tasks(UNUSED_UID) != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert user_tasks(UNUSED_UID) == 1
    finally:
        child.kill()
        child.wait()


def test_user_tasks_counts_threads_not_processes() -> None:
    """Our uid has at least as many tasks as this process has threads (a pool of them is started)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(time.sleep, [0.2] * 4))  # four threads alive while we count
        own = int(re.search(r"^Threads:\s*(\d+)", Path("/proc/self/status").read_text(), re.M).group(1))
        assert own >= 5 and user_tasks() >= own


def test_privileged_follows_uid_and_capabilities() -> None:
    caps = re.search(r"^CapEff:\s*([0-9a-f]+)", Path("/proc/self/status").read_text(), re.M)
    effective = int(caps.group(1), 16) if caps else 0
    expected = os.getuid() == 0 or bool(effective & ((1 << 21) | (1 << 24)))
    assert privileged() is expected
