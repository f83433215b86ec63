"""Cores kept for the GPU turns' host side, apart from the builds (``PTXGYM_TIMING_CORES``).

A call's wall clock, which bounds what the candidate's process reports, is the trusted side's round trip:
its command, the runner's launch and synchronisation, its reply and the trusted copy of the outputs.
Under load every wake-up in it may wait for a core. (The large honest excess first seen with 16 envs
streaming on an H100 host, 0.27-1.55 ms for the worst candidate, turned out to follow the call's length:
20 ms SIMT variants show it with one env, 0.76 ms GEMM variants stay within 0.16 ms at 1 and 16 envs,
``bench/results/throughput_2026-12-06_excess_h100.txt``.) With ``PTXGYM_TIMING_CORES=n`` on a host with
one GPU, the last ``n`` hardware threads (whole physical cores: with SMT, a core's threads together) are
kept for the runner a subject takes (every thread of it, from the take on: spares warm on any core,
several at once) and the thread holding the GPU (``GpuQueue.turn``); builds (nvcc and the tools it runs,
``Jail.cpus``) and the backstop's scan helpers run on the others. The evaluator's other threads are not
moved. With several GPUs each GPU, by its host number, gets its own slice. Evaluators sharing one GPU
(MIG, fractional Ray GPUs) share its slice, as they share its timing. Pinning is best effort: a mask the
kernel refuses leaves the thread where it was.

Off by default (``DEFAULT_TIMING_CORES``): the one measurement, 16 envs streaming on an H100 host with two
threads kept, showed no smaller honest wall excess than runs without (median 0.21 ms and worst 0.64
against 0.05-0.07 and 0.27-0.32; not side by side: ``bench/results/throughput_2026-12-06_cores_h100.txt``
against ``throughput_2026-12-06_refill_h100.txt``). ``bench/gpu_session.sh s25s`` compares them side by
side.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_USABLE = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
"""The cores this process could use when this module was imported: a thread pinned for a GPU turn
(``GpuQueue.turn``) asks ``sched_getaffinity`` about itself, so its answer is not the process's."""
DEFAULT_TIMING_CORES = 0
"""Hardware threads kept per GPU when ``PTXGYM_TIMING_CORES`` is unset (module docstring: off for now)."""
_SYS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class CoreSplit:
    """Which cores time and which build (both empty: no split, every process where it was)."""

    timing: tuple[int, ...] = ()
    builds: tuple[int, ...] = ()

    def record(self) -> dict:
        """JSON-ready fields (a verdict's ``details["cores"]``)."""
        return {"timing": list(self.timing), "builds": list(self.builds)}


def gpus() -> int:
    """NVIDIA GPUs this host shows (``/dev/nvidia<N>`` device nodes; 0 on a CPU host)."""
    try:
        return sum(1 for name in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", name))
    except OSError:
        return 0


def gpu_minor(pci_bus_id: str, proc: Path = Path("/proc/driver/nvidia/gpus")) -> int | None:
    """The host's number of the GPU at ``pci_bus_id`` (its ``/dev/nvidia<N>``), None where unknown.

    A process given one GPU of several (``CUDA_VISIBLE_DEVICES``, a Ray actor) calls it device 0, as its
    neighbours call theirs: this number tells them apart (the driver's ``Device Minor``).
    """

    def bus(name: str) -> str:  # "0000:18:00.0" -> "18:00.0" (domains are written 4 or 8 digits wide)
        return name.strip().lower().split(":", 1)[-1]

    if not pci_bus_id.strip():
        return None
    want = bus(pci_bus_id)
    try:
        for entry in proc.iterdir():
            if bus(entry.name) == want:
                for line in (entry / "information").read_text().splitlines():
                    key, _, value = line.partition(":")
                    if key.strip() == "Device Minor":
                        return int(value.strip())
    except (OSError, ValueError):
        return None
    return None


def siblings(cpu: int) -> set[int]:
    """The hardware threads sharing ``cpu``'s physical core (itself included; itself alone if unknown)."""
    try:
        text = (_SYS_CPU / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip()
        found: set[int] = set()
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            found.update(range(int(lo), int(hi or lo) + 1))
        return found | {cpu}
    except (OSError, ValueError):
        return {cpu}


def split(
    usable: set[int] | frozenset[int] | None = None,
    wanted: int | None = None,
    device: int | None = 0,
    n_gpus: int | None = None,
) -> CoreSplit:
    """The split for ``device`` (the host's GPU number, ``gpu_minor``): ``wanted`` hardware threads per GPU.

    ``wanted``: ``PTXGYM_TIMING_CORES`` (``settings.timing_cores``, read by the caller); None:
    ``DEFAULT_TIMING_CORES``. Timing threads are taken whole physical cores at a
    time from the end, a slice per GPU (``device``'s for this one); builds get what no GPU keeps, nor any
    hardware thread sharing a kept core. None kept on a host without GPUs, when ``wanted`` is 0, when
    builds would get fewer than are kept, or with several GPUs and ``device`` unknown (None): every
    process would take the same slice.
    """
    cores = sorted(_USABLE if usable is None else usable)
    count = gpus() if n_gpus is None else n_gpus
    if count <= 0 or not cores:
        return CoreSplit()
    if wanted is None:
        wanted = DEFAULT_TIMING_CORES
    if wanted <= 0:
        return CoreSplit()
    slots: list[list[int]] = []
    left = list(cores)
    for _ in range(count):
        slot: list[int] = []
        while left and len(slot) < wanted:
            whole = sorted(siblings(left[-1]) & set(left), reverse=True)
            slot += whole
            left = [c for c in left if c not in whole]
        slots.append(sorted(slot))
    kept = sum(len(s) for s in slots)
    if len(left) < kept or any(len(s) < wanted for s in slots) or (device is None and count > 1):
        return CoreSplit()
    return CoreSplit(timing=tuple(slots[(device or 0) % count]), builds=tuple(left))


def for_gpu(pci_bus_id: str, wanted: int | None = None) -> CoreSplit:
    """The split of the evaluator of the GPU at ``pci_bus_id`` (``split`` with its host number)."""
    count = gpus()
    return split(wanted=wanted, device=gpu_minor(pci_bus_id) if count > 1 else 0, n_gpus=count)


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
    except (OSError, AttributeError):  # a process gone, a mask outside this cpuset, no such call here
        return False
    return True


def usable() -> tuple[int, ...]:
    """Every core this process could use (``_USABLE``)."""
    return tuple(sorted(_USABLE))


def unpin() -> None:
    """Let the calling thread run on every core this process could use (a spawner's first step).

    A thread started during a pinned GPU turn inherits the pin, and so would every process it starts.
    """
    pin(0, usable())
