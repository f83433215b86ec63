"""RLIMIT_NPROC's facts: whether the kernel enforces it for this process, and what it counts now."""

from __future__ import annotations

import os
import re
from pathlib import Path


def privileged() -> bool:
    """Root, CAP_SYS_RESOURCE or CAP_SYS_ADMIN: the kernel does not enforce RLIMIT_NPROC."""
    if os.getuid() == 0:
        return True
    found = re.search(r"^CapEff:\s*([0-9a-f]+)", Path("/proc/self/status").read_text(), re.M)
    return bool(found and int(found.group(1), 16) & ((1 << 21) | (1 << 24)))


def user_tasks(uid: int | None = None) -> int:
    """Threads of every visible process of real uid ``uid`` (default: ours): what RLIMIT_NPROC counts."""
    uid = os.getuid() if uid is None else uid
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:  # the process ended while we looked
            continue
        uids, threads = re.search(r"^Uid:\s*(\d+)", text, re.M), re.search(r"^Threads:\s*(\d+)", text, re.M)
        if uids and threads and int(uids.group(1)) == uid:
            total += int(threads.group(1))
    return total
