"""Cores kept for the GPU turns apart from builds (``ptxgym.confine.cores``): who runs where.

Real processes and threads: a build's launcher, a runner, a scan helper and the thread holding the GPU
queue are each asked where the kernel lets them run. Tests that need two usable cores skip on fewer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ptxgym.confine import cores
from ptxgym.confine.launch import Jail, command
from ptxgym.evaluation.trusted.gpu_queue import GpuQueue

USABLE = sorted(os.sched_getaffinity(0))
two_cores = pytest.mark.skipif(len(USABLE) < 2, reason="needs two usable cores")
WHERE = "import os; print(sorted(os.sched_getaffinity(0)))"


def test_the_last_cores_are_kept_when_asked_and_none_by_default(monkeypatch) -> None:
    monkeypatch.setattr(cores, "siblings", lambda cpu: {cpu})  # one hardware thread per core
    assert cores.split(set(range(16)), n_gpus=1) == cores.CoreSplit()  # off by default (module docstring)
    big = cores.split(set(range(16)), wanted=2, n_gpus=1)
    assert big.timing == (14, 15) and big.builds == tuple(range(14))
    assert cores.split(set(range(4)), wanted=1, n_gpus=1) == cores.CoreSplit(timing=(3,), builds=(0, 1, 2))
    assert cores.split(set(range(4)), wanted=3, n_gpus=1) == cores.CoreSplit()  # builds would get fewer
    assert cores.split(set(range(16)), wanted=0, n_gpus=1) == cores.CoreSplit()
    assert cores.split(set(range(16)), wanted=2, n_gpus=0) == cores.CoreSplit()  # a CPU host (a build node)
    assert cores.split(set(range(16)), wanted=4, n_gpus=1).timing == (12, 13, 14, 15)


def test_the_setting_is_read_by_the_callers_and_a_bad_one_does_not_stop_a_build(monkeypatch) -> None:
    from ptxgym.cpu.jail import build_cores
    from ptxgym.records import settings

    monkeypatch.setattr(cores, "siblings", lambda cpu: {cpu})
    monkeypatch.setattr(cores, "_USABLE", frozenset(range(16)))
    monkeypatch.setattr(cores, "gpus", lambda: 1)
    monkeypatch.delenv("PTXGYM_TIMING_CORES", raising=False)
    assert settings.timing_cores() is None and build_cores() == ()  # off by default
    monkeypatch.setenv("PTXGYM_TIMING_CORES", "2")
    assert build_cores() == tuple(range(14))
    monkeypatch.setenv("PTXGYM_TIMING_CORES", "4")
    assert settings.timing_cores() == 4 and build_cores() == tuple(range(12))
    monkeypatch.setenv("PTXGYM_TIMING_CORES", "0")
    assert build_cores() == ()
    monkeypatch.setenv("PTXGYM_TIMING_CORES", "many")
    with pytest.raises(ValueError, match="PTXGYM_TIMING_CORES"):
        settings.timing_cores()  # the evaluator's construction raises it
    assert build_cores() == ()  # a build goes on anywhere, the setting's error logged


def test_several_gpus_keep_nothing_unless_asked_and_then_a_slice_each(monkeypatch) -> None:
    monkeypatch.setattr(cores, "siblings", lambda cpu: {cpu})
    assert cores.split(set(range(32)), n_gpus=8) == cores.CoreSplit()
    slices = [cores.split(set(range(32)), wanted=2, device=d, n_gpus=8) for d in range(8)]
    assert [s.timing for s in slices[:2]] == [(30, 31), (28, 29)] and slices[7].timing == (16, 17)
    assert all(s.builds == tuple(range(16)) for s in slices)
    assert len({c for s in slices for c in s.timing}) == 16  # no two GPUs share a core
    assert cores.split(set(range(16)), wanted=2, n_gpus=8) == cores.CoreSplit()  # builds would get none


def test_a_kept_core_takes_its_hardware_threads_out_of_the_builds(monkeypatch) -> None:
    pairs = {c: {c % 8, c % 8 + 8} for c in range(16)}  # cpu c and c + 8 share a physical core
    monkeypatch.setattr(cores, "siblings", lambda cpu: pairs[cpu])
    got = cores.split(set(range(16)), wanted=2, n_gpus=1)
    assert got.timing == (7, 15)  # one whole physical core: both its threads
    assert 7 not in got.builds and 15 not in got.builds and len(got.builds) == 14
    assert cores.siblings(0) >= {0}  # this host's own answer always holds the cpu itself


@two_cores
def test_the_launcher_runs_its_program_on_the_jail_s_cores(tmp_path: Path) -> None:
    one = USABLE[0]
    argv = command(Jail(cpus=(one,)), [sys.executable, "-c", WHERE])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([one])
    free = subprocess.run(command(Jail(), [sys.executable, "-c", WHERE]), capture_output=True, text=True)
    assert free.stdout.strip() == str(USABLE)  # no cpus: where its parent may run


@two_cores
def test_a_build_jail_runs_on_the_build_cores(monkeypatch) -> None:
    from ptxgym.cpu import jail as build_jail_module

    monkeypatch.setattr(cores, "_USABLE", frozenset(USABLE))
    monkeypatch.setattr(cores, "gpus", lambda: 1)
    monkeypatch.setattr(cores, "siblings", lambda cpu: {cpu})
    monkeypatch.setenv("PTXGYM_TIMING_CORES", "1")
    want = cores.split(wanted=1)
    assert want.timing == (USABLE[-1],) and want.builds == tuple(USABLE[:-1])
    toolchain = build_jail_module.Toolchain.__new__(build_jail_module.Toolchain)  # not read without Landlock
    confined = build_jail_module.Confinement(kind="off", detail="off for the test")
    made = build_jail_module.build_jail(toolchain, [], Path("/tmp"), (60.0, 0), confined)
    assert made.cpus == want.builds


@two_cores
def test_the_thread_holding_the_gpu_runs_on_the_timing_cores_for_its_turn_only() -> None:
    queue = GpuQueue(cpus=(USABLE[-1],))
    seen: dict[str, list[int]] = {}

    def turn() -> None:
        seen["before"] = sorted(os.sched_getaffinity(0))
        with queue.turn():
            seen["during"] = sorted(os.sched_getaffinity(0))
        seen["after"] = sorted(os.sched_getaffinity(0))

    thread = threading.Thread(target=turn)
    thread.start()
    thread.join(30)
    assert seen == {"before": USABLE, "during": [USABLE[-1]], "after": USABLE}
    assert sorted(os.sched_getaffinity(0)) == USABLE  # other threads untouched
    with GpuQueue().turn():  # no cpus: the thread stays where it was
        assert sorted(os.sched_getaffinity(0)) == USABLE


def test_a_refused_mask_is_no_error() -> None:
    assert not cores.pin(0, ())
    assert not cores.pin(0, (10**6,))  # no such core
    assert sorted(os.sched_getaffinity(0)) == USABLE


@two_cores
def test_a_spare_started_during_a_turn_does_not_inherit_its_pin(tmp_path: Path) -> None:
    """The spawner thread may first run inside a pinned turn; its spares must warm on any core."""
    from ptxgym.evaluation.trusted.pool import WorkerPool

    class Spare:
        def __init__(self, log_dir, sandboxed) -> None:
            self.where = sorted(os.sched_getaffinity(0))  # the spawner thread's, which a Popen inherits
            self.child = subprocess.run([sys.executable, "-c", WHERE], capture_output=True, text=True)

    pool = WorkerPool(0, spares=0, log_dir=tmp_path, factory=Spare)
    with GpuQueue(cpus=(USABLE[-1],)).turn():
        assert sorted(os.sched_getaffinity(0)) == [USABLE[-1]]
        spare = pool._spawn()
    assert spare.where == USABLE and spare.child.stdout.strip() == str(USABLE)
    pool._spawner.shutdown(wait=True)


def test_each_gpu_is_told_apart_by_its_host_number(tmp_path: Path, monkeypatch) -> None:
    """Ray actors each call their GPU device 0: the driver's minor number picks their slices."""
    for name, minor in (("0000:18:00.0", 0), ("00000000:3b:00.0", 1)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "information").write_text(
            f"Model: H100\nBus Location: {name}\nDevice Minor: {minor}\n"
        )
    assert cores.gpu_minor("0000:3B:00.0", tmp_path) == 1 and cores.gpu_minor("0000:18:00.0", tmp_path) == 0
    assert cores.gpu_minor("0000:99:00.0", tmp_path) is None and cores.gpu_minor("", tmp_path) is None
    monkeypatch.setattr(cores, "siblings", lambda cpu: {cpu})
    monkeypatch.setattr(cores, "_USABLE", frozenset(range(32)))
    monkeypatch.setattr(cores, "gpus", lambda: 2)
    monkeypatch.setattr(cores, "gpu_minor", lambda bus, proc=tmp_path: {"a": 0, "b": 1}.get(bus))
    assert cores.for_gpu("a", 2).timing == (30, 31) and cores.for_gpu("b", 2).timing == (28, 29)
    assert cores.for_gpu("unknown", 2) == cores.CoreSplit()  # two GPUs, this one unknown: nothing kept
    assert cores.for_gpu("a") == cores.CoreSplit()  # nothing kept unless asked
    monkeypatch.setattr(cores, "gpus", lambda: 1)
    assert cores.for_gpu("unknown", 2).timing == (30, 31)  # the one GPU
