"""The trusted side of the native runner on the CPU.

The setting, the choice of process, the GPU files of the jail (resolved from a process's maps), the
runner's environment and the commands' JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ptxgym.confine import landlock, seccomp
from ptxgym.evaluation.protocol import ApplySandbox, Attach, Load, VmmBlob, VmmRun
from ptxgym.evaluation.runner import jail
from ptxgym.evaluation.trusted import native_worker
from ptxgym.evaluation.trusted.native_worker import (
    NativeRunners,
    NativeSpec,
    NativeUnavailable,
    runner_environ,
)
from ptxgym.records import settings


def test_candidate_process_setting(monkeypatch):
    monkeypatch.delenv("PTXGYM_CANDIDATE_PROCESS", raising=False)
    assert settings.candidate_process() == "native"
    monkeypatch.setenv("PTXGYM_CANDIDATE_PROCESS", "python")
    assert settings.candidate_process() == "python"
    monkeypatch.setenv("PTXGYM_CANDIDATE_PROCESS", "Native")
    assert settings.candidate_process() == "native"
    monkeypatch.setenv("PTXGYM_CANDIDATE_PROCESS", "rust")
    with pytest.raises(ValueError, match="python or native, got 'rust'"):
        settings.candidate_process()


def test_runner_read_extra_takes_absolute_paths(monkeypatch):
    monkeypatch.setenv("PTXGYM_RUNNER_READ_EXTRA", "/etc/nvidia:/opt/x")
    assert settings.runner_read_extra() == ("/etc/nvidia", "/opt/x")
    monkeypatch.setenv("PTXGYM_RUNNER_READ_EXTRA", "/ok:relative")
    with pytest.raises(ValueError, match="absolute paths, got relative"):
        settings.runner_read_extra()


def _lib(root: Path, name: str, target: str | None = None) -> Path:
    path = root / name
    if target is None:
        path.write_bytes(b"\x7fELF")
    else:
        path.symlink_to(target)
    return path


def _maps(*paths: Path) -> str:
    lines = [f"7f00000{k}000-7f00000{k}fff r-xp 00000000 08:01 {k} {p}" for k, p in enumerate(paths)]
    return "\n".join([*lines, "7ffd0000-7ffd1000 rw-p 00000000 00:00 0 [stack]"]) + "\n"


def test_gpu_files_are_the_mapped_driver_files_resolved(tmp_path):
    drv, rt, tk = tmp_path / "driver", tmp_path / "torch", tmp_path / "toolkit"
    for d in (drv, rt, tk):
        d.mkdir()
    real = _lib(drv, "libcuda.so.570.1")
    link = _lib(drv, "libcuda.so.1", "libcuda.so.570.1")
    ptx = _lib(drv, "libnvidia-ptxjitcompiler.so.570.1")
    cudart = _lib(rt, "libcudart.so.13")
    cupti = _lib(tk, "libcupti.so.13")
    nvperf = _lib(tk, "libnvperf_host.so")
    _lib(tk, "libcublas.so.13")  # beside libcupti: never part of the files
    nvml = _lib(drv, "libnvidia-ml.so.1")
    files = jail.gpu_files(_maps(link, ptx, nvml, cudart, Path("/usr/lib/libc.so.6")))
    assert files.libcuda == real and files.driver == (ptx,) and files.cudart == cudart
    assert jail.cupti_files(cupti) == (cupti, nvperf) and jail.cupti_files(None) == ()
    assert not any("cublas" in p.name for p in (*files.all(), *jail.cupti_files(cupti)))


def test_gpu_files_fall_back_to_the_toolkit_cudart_and_ldconfig(tmp_path, monkeypatch):
    libcuda = _lib(tmp_path, "libcuda.so.1")
    monkeypatch.setattr(jail, "_ldconfig", lambda name: libcuda if name == "libcuda.so.1" else None)
    fallback = _lib(tmp_path, "libcudart.so.13")
    files = jail.gpu_files(_maps(Path("/usr/lib/libc.so.6")), fallback)
    assert files.libcuda == libcuda and files.cudart == fallback
    monkeypatch.setattr(jail, "_ldconfig", lambda name: None)
    with pytest.raises(FileNotFoundError, match="no libcuda.so.1"):
        jail.gpu_files(_maps())


def test_the_gpu_jail_allows_exact_files_never_their_directories(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXGYM_RUNNER_READ_EXTRA", "/etc/extra-driver-file")
    binary = Path("/bin/true").resolve()
    files = jail.GpuFiles(libcuda=tmp_path / "libcuda.so.1", cudart=tmp_path / "libcudart.so.13")
    libs = (tmp_path / "libcupti.so",)
    rules = jail.runner_jail(binary, tmp_path / "scratch", files, libs)
    if landlock.abi()[0] == 0:
        assert rules.landlock is None
        pytest.skip("no Landlock on this kernel: no file rules to inspect")
    read = set(rules.landlock.read)
    assert {str(p) for p in (*files.all(), *libs)} <= read and "/etc/extra-driver-file" in read
    assert str(tmp_path) not in read  # the directory holding the libraries is not readable
    assert rules.families == () and rules.rlimits["RLIMIT_CORE"] == 0
    assert rules.rlimits["RLIMIT_FSIZE"] == jail.MAX_FILE_BYTES
    cpu = jail.runner_jail(binary, tmp_path / "scratch", None, libs)
    assert cpu.landlock is not None and str(libs[0]) in cpu.landlock.read
    assert not set(cpu.landlock.read) & {str(p) for p in files.all()} and "/sys" not in cpu.landlock.read


def test_runner_environment_is_minimal(tmp_path):
    base = {
        "HOME": "/root",
        "CUDA_VISIBLE_DEVICES": "1",
        "API_TOKEN": "x",
        "CUDA_TOKEN": "y",
        "LD_PRELOAD": "z",
    }
    env = runner_environ(base, tmp_path)
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["HOME"] == str(tmp_path)
    assert env["CUDA_CACHE_PATH"] == str(tmp_path / "cuda-cache") and env["TMPDIR"] == str(tmp_path)
    assert not {"API_TOKEN", "CUDA_TOKEN", "LD_PRELOAD"} & set(env)


class _Encoder(native_worker.NativeHandle):
    """Only the encoding of a NativeHandle (no process)."""

    def __init__(self, scratch: Path) -> None:  # noqa: D107 - no process is started
        self.scratch, self.loaded = scratch, 0


def test_commands_go_as_protocol_json(tmp_path):
    enc = _Encoder(tmp_path)
    vmm = VmmBlob(total=8192, page=4096, runs=[VmmRun(offset=0, size=4096)])
    body = json.loads(enc._encode(Attach(arena="a", blob=object(), vmm=vmm, sets=[], flush_bytes=64)))
    assert (
        "blob" not in body and body["vmm"]["runs"] == [{"offset": 0, "size": 4096}] and body["op"] == "attach"
    )
    so = tmp_path / "built.so"
    so.write_bytes(b"\x7fELF candidate")
    load = json.loads(enc._encode(Load(kind="so", path=str(so), entry="run")))
    copy = Path(load["path"])
    assert (
        copy.parent == tmp_path
        and copy.read_bytes() == so.read_bytes()
        and copy.stat().st_ino != so.stat().st_ino
    )


def test_native_runners_choose_only_candidates_on_guard_page_arenas(tmp_path, monkeypatch):
    spec = NativeSpec(Path("/bin/true"), 0, None)
    monkeypatch.setattr(native_worker, "native_spec", lambda device, cupti: spec)
    runners = NativeRunners(True, 0, 0, tmp_path, sandboxed=False)
    try:
        assert runners.choose(candidate=False, guard_pages=True, cupti_needed=False) is None  # a baseline
        assert runners.note(False, True, candidate=False).endswith(
            "a library baseline runs in the Python worker"
        )
        assert runners.choose(candidate=True, guard_pages=False, cupti_needed=False) is None
        assert "no guard pages" in runners.note(False, guard_pages=False)
        pool = runners.choose(candidate=True, guard_pages=True, cupti_needed=False)
        assert pool is not None and pool.factory is not None and runners.note(True, True).startswith("native")
        runners.drop("a runner could not be set up: boom")
        assert (
            runners.choose(True, True, False) is None
            and runners.note(False, True) == "python: " + runners.why
        )
        assert "boom" in runners.why
    finally:
        runners.close()
    assert NativeRunners(False, 0, 0, tmp_path, False).choose(True, True, False) is None


def test_one_failed_runner_set_up_costs_one_subject_three_in_a_row_drop_the_runners(tmp_path):
    """``NativeRunners.failed``: the note names the failure; the runners stay until the third in a row.

    A fallback subject's target credit is withheld (no hardware counters in the Python worker), so a
    transient failure must not end the runners for every later candidate (a reviewer's find).
    """
    from ptxgym.evaluation.trusted.native_worker import DROP_AFTER_FAILURES

    runners = NativeRunners(True, 0, 0, tmp_path, sandboxed=False)
    note = runners.failed("a native runner could not be set up: start timed out")
    assert note == "python: a native runner could not be set up: start timed out" and runners.why == ""
    runners.worked()  # one that worked: the count starts again
    for i in range(DROP_AFTER_FAILURES):
        assert runners.why == "", i
        note = runners.failed(f"a native runner could not be set up: failure {i}")
    assert runners.why.startswith(f"{DROP_AFTER_FAILURES} runner set-ups failed in a row")
    assert note == "python: " + runners.why and f"failure {DROP_AFTER_FAILURES - 1}" in note


def test_set_ups_failing_only_with_the_counter_query_are_counted_apart(tmp_path):
    """Failures with the counter query are not reset by the set-ups without it that come between."""
    from ptxgym.evaluation.trusted.native_worker import DROP_AFTER_FAILURES

    runners = NativeRunners(True, 0, 0, tmp_path, sandboxed=False)
    for i in range(DROP_AFTER_FAILURES):
        assert runners.why == "", i
        runners.failed(f"a native runner could not be set up: query {i}", hw=True)
        runners.worked(hw=False)  # a candidate that needs no query, between
    assert runners.why.startswith(f"{DROP_AFTER_FAILURES} runner set-ups with the counter query failed")
    other = NativeRunners(True, 0, 0, tmp_path, sandboxed=False)
    for _ in range(2 * DROP_AFTER_FAILURES):
        other.failed("a native runner could not be set up: query", hw=True)
        other.worked(hw=True)  # the same kind worked: the count starts again
        other.failed("a native runner could not be set up: start timed out", hw=False)
        other.worked(hw=True)  # one with the query also shows a plain set-up works (a review's find)
    assert other.why == ""


def test_an_unavailable_runner_is_recorded_once(tmp_path, monkeypatch, caplog):
    def unavailable(device, cupti):
        raise NativeUnavailable("no cuda.h was found")

    monkeypatch.setattr(native_worker, "native_spec", unavailable)
    runners = NativeRunners(True, 0, 0, tmp_path, sandboxed=False)
    assert runners.choose(True, True, False) is None and runners.choose(True, True, False) is None
    assert runners.note(False, True) == "python: the native runner is unavailable: no cuda.h was found"
    assert sum("Python worker" in r.getMessage() for r in caplog.records) == 1


def test_native_spec_refuses_a_runner_without_cupti_when_the_evaluator_needs_it(monkeypatch):
    from ptxgym.evaluation.runner import build

    real = build.plan()
    if not real.cuda:
        pytest.skip("no cuda.h here: the spec stops earlier")
    monkeypatch.setattr(
        native_worker, "plan", lambda: build.RunnerBuild(real.compiler, real.flags, True, None, "x")
    )
    monkeypatch.setattr(native_worker, "build_runner", lambda: Path("/bin/true"))
    monkeypatch.setattr(native_worker, "gpu_files", lambda *a: jail.GpuFiles(Path("/x"), cudart=Path("/y")))
    monkeypatch.setattr(native_worker, "cupti_files", lambda lib: ())
    with pytest.raises(NativeUnavailable, match="times with CUPTI but the runner has no CUPTI path"):
        native_worker.native_spec(0, cupti_needed=True)
    assert native_worker.native_spec(0, cupti_needed=False).cupti is False


def test_the_sandbox_command_asks_for_the_hw_prepare_only_when_the_subject_is_hw_counted(tmp_path):
    """``ApplySandbox.hw_prepare`` reaches the runner's jail spec (the query costs ~0.2 s: only if asked)."""
    from ptxgym.confine.launch import Jail

    enc = _Encoder(tmp_path)
    enc.jail, enc.landlock_at_exec, enc.protocol_fds = Jail(families=()), False, (5, 8)
    for asked in (False, True):
        cmd = ApplySandbox(mode="on", scratch=str(tmp_path), hw_prepare=asked)
        assert json.loads(enc._encode(cmd))["jail"]["hw_prepare"] is asked
    rows = json.loads(enc._encode(cmd))["jail"]["filter"]
    assert len(rows) > len(seccomp.network_filter(os.uname().machine, ()))  # the protocol pipes are kept
    off = json.loads(enc._encode(ApplySandbox(mode="off", scratch=str(tmp_path), hw_prepare=True)))
    assert "jail" not in off  # no jail is applied, so nothing is queried before one
