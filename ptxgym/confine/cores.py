"""Cores kept for the GPU turns' host side, apart from the builds (``PTXGYM_TIMING_CORES``).

A call's wall clock, which bounds what the candidate's process reports, is the trusted side's round trip:
its command, the runner's launch and synchronisation, its reply and the trusted copy of the outputs.
Under load every wake-up in it waits for a core: on an H100 host (16 cores) with 16 envs streaming, the
honest expert GEMM's median per-call excess over its calibrated overhead reached 0.27-0.32 ms and the
calibration's spread set its allowance at 1.16 ms (median), against 0.003-0.008 ms and 0.01-0.02 ms on
the quiet host (``bench/results/throughput_2026-12-06_refill_h100.txt``,
``wall_allowance_2026-12-06_parts_h100.txt``). So on a host with ``MIN_HOST_CORES`` or more the last
``DEFAULT_TIMING_CORES`` cores this process may use are kept for the runner a subject takes (every thread
of it, from the take on: spares warm on any core, several at once) and the thread holding the GPU
(``GpuQueue.turn``), and builds (nvcc and the tools it runs, ``Jail.cpus``) and the backstop's scan
helpers run on the others. The evaluator's other threads are not moved (the interpreter's lock lets one
run at a time). Pinning is best effort: a mask the kernel refuses leaves the process where it was.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ptxgym.records import settings

_USABLE = frozenset(os.sched_getaffinity(0))
"""The cores this process could use when this module was imported: a thread pinned for a GPU turn
(``GpuQueue.turn``) asks ``sched_getaffinity`` about itself, so its answer is not the process's."""
DEFAULT_TIMING_CORES = 2
MIN_HOST_CORES = 8
"""Below this many usable cores no core is kept apart by default (builds would lose too large a share)."""


@dataclass(frozen=True)
class CoreSplit:
    """Which cores time and which build (both empty: no split, every process where it was)."""

    timing: tuple[int, ...] = ()
    builds: tuple[int, ...] = ()

    def record(self) -> dict:
        """JSON-ready fields (``EnvironmentInfo.sandbox``'s neighbour in a verdict's details)."""
        return {"timing": list(self.timing), "builds": list(self.builds)}


def split(usable: set[int] | None = None, wanted: int | None = None) -> CoreSplit:
    """The split for this process: ``wanted`` cores (``PTXGYM_TIMING_CORES``; default above) kept apart.

    None kept when ``wanted`` is 0 or would leave the builds fewer cores than the timing.
    """
    cores = sorted(_USABLE if usable is None else usable)
    if wanted is None:
        wanted = settings.timing_cores()
    if wanted is None:
        wanted = DEFAULT_TIMING_CORES if len(cores) >= MIN_HOST_CORES else 0
    if wanted <= 0 or len(cores) - wanted < wanted:
        return CoreSplit()
    return CoreSplit(timing=tuple(cores[-wanted:]), builds=tuple(cores[:-wanted]))


def pin_process(pid: int, cores: tuple[int, ...]) -> bool:
    """Run every thread of process ``pid`` on ``cores`` (threads it starts later inherit); False if not.

    ``sched_setaffinity`` moves one thread: a runner started as a spare has CUDA's threads by the time a
    subject takes it. A thread that ends meanwhile is skipped.
    """
    if not cores:
        return False
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return False
    moved = [pin(tid, cores) for tid in tids]
    return any(moved)


def pin(pid: int, cores: tuple[int, ...]) -> bool:
    """Run ``pid`` (0: the calling thread) on ``cores``; False if not done (none given, or refused)."""
    if not cores:
        return False
    try:
        os.sched_setaffinity(pid, cores)
    except OSError:  # a process gone, or a mask outside this container's cpuset
        return False
    return True
