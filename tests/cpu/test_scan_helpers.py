"""The build's backstop scan in helper processes (``ptxgym.cpu.scan_helpers``).

The helpers are real processes of our own code; what is checked: they give the verdict the scan gives
in this process, they run it elsewhere (this process's scan function is not called), and every way a
helper can fail (cannot start, dies, answers nonsense, never answers) still ends in a scanned build: in
this process, or refused and not cached when the scan outlived its limit. Test doubles here are helpers
that misbehave (our own error paths), not stand-ins for the scan.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from ptxgym.cpu import build, scan_helpers
from ptxgym.cpu.build import scan_kept
from ptxgym.cpu.scan_helpers import TIMEOUT_RULE, HelperPool
from ptxgym.records import settings

HOSTILE = """# 1 "kernel.cu"
# 12 "/usr/include/string.h" 3
extern void *memchr(void *, int, unsigned long) __asm__("memchr");
# 9 "src/kernel.cu"
void run() { const char* s = "asm"; }
# 11
void run2() { __asm__ volatile("nop"); }
"""


def _kept(tmp_path: Path, hostile: bool) -> list[Path]:
    translation = tmp_path / "kernel.cudafe1.cpp"
    translation.write_text(HOSTILE if hostile else HOSTILE.replace('__asm__ volatile("nop")', ""))
    assembly = tmp_path / "kernel.s"
    assembly.write_text("\t.text\n\t.globl\trun\nrun:\n\tret\n")
    return [translation, assembly]


class Local:
    """This process's scan, counting its calls (a helper that served leaves it uncalled)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, files):
        self.calls += 1
        return scan_kept(files)


@pytest.fixture
def pool():
    helpers = HelperPool(2)
    yield helpers
    helpers.close()


@pytest.mark.parametrize("hostile", [True, False])
def test_a_helper_gives_the_verdict_of_the_scan_in_this_process(tmp_path, pool, hostile) -> None:
    files = _kept(tmp_path, hostile)
    local = Local()
    got = pool.scan(files, local)
    assert local.calls == 0 and pool.fallbacks == 0  # the helper scanned, not this process
    assert got == scan_kept(files)
    if hostile:
        assert got is not None and got.rule == "host-asm" and (got.file, got.line) == ("kernel.cu", 11)
        assert "__asm__ volatile" in got.message
    else:
        assert got is None
    assert pool.scan(files, local) == got and local.calls == 0  # the helper serves again


def test_concurrent_scans_share_the_helpers(tmp_path, pool) -> None:
    files = _kept(tmp_path, True)
    local, out = Local(), []
    threads = [threading.Thread(target=lambda: out.append(pool.scan(files, local))) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 5 and all(v == scan_kept(files) for v in out) and local.calls == 0
    assert pool._count <= 2


READY_LINE = scan_helpers.ready_line()
SAY_READY = f"print({READY_LINE!r}, flush=True); import sys, time; "
ERROR_LINE = json.dumps({"error": "x"})
FOREIGN = (  # a helper whose ptxgym is not ours (an older install), whose rules would pass anything
    "import sys; print('ready /elsewhere/ptxgym/cpu/build.py /elsewhere/host_asm.py', flush=True)\n"
    "for line in sys.stdin: print('{\"verdict\": null}', flush=True)"
)


@pytest.mark.parametrize(
    ("name", "script"),
    [
        ("cannot start", None),
        ("no ready line", "print('hello', flush=True)"),
        ("another ptxgym", FOREIGN),
        ("dies on the request", SAY_READY + "sys.stdin.readline()"),
        ("answers nonsense", SAY_READY + "sys.stdin.readline(); print('{oops')"),
        ("reports an error", SAY_READY + f"sys.stdin.readline(); print({ERROR_LINE!r})"),
    ],
)
def test_a_failed_helper_leaves_the_scan_to_this_process(tmp_path, name, script) -> None:
    argv = ["/nonexistent/python"] if script is None else [sys.executable, "-c", script]
    helpers = HelperPool(1, argv)
    files = _kept(tmp_path, True)
    local = Local()
    try:
        got = helpers.scan(files, local)
        assert local.calls == 1 and helpers.fallbacks == 1, name
        assert got == scan_kept(files) and got is not None and got.rule == "host-asm", name
        assert helpers._count == 0 and not helpers.pids()  # the failed helper is gone, its slot free
    finally:
        helpers.close()


def test_a_helper_silent_past_its_start_limit_is_killed(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(scan_helpers, "START_TIMEOUT_S", 0.5)
    started: list = []
    real = scan_helpers._Helper.__init__

    def spy(self, argv):
        started.append(self)
        real(self, argv)

    monkeypatch.setattr(scan_helpers._Helper, "__init__", spy)
    helpers = HelperPool(1, [sys.executable, "-c", "import time; time.sleep(60)"])
    local = Local()
    assert helpers.scan(_kept(tmp_path, True), local) is not None and local.calls == 1
    (helper,) = started
    assert helper.proc.poll() is not None and helpers._count == 0  # killed, not left sleeping


def test_a_scan_past_its_limit_is_a_refusal_and_kills_its_helper(tmp_path) -> None:
    helpers = HelperPool(1, [sys.executable, "-c", SAY_READY + "sys.stdin.readline(); time.sleep(60)"])
    local = Local()
    try:
        got = helpers.scan(_kept(tmp_path, False), local, timeout_s=0.5)
        assert got is not None and not got.ok and got.rule == TIMEOUT_RULE and "0.5 s" in got.message
        assert local.calls == 0 and helpers._count == 0  # not scanned again here: it would hang as long
    finally:
        helpers.close()


def test_helpers_work_with_descriptors_past_select_s_limit(tmp_path) -> None:
    """``select`` refuses descriptors from 1024 on; a process holding many files still gets its scans."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the descriptor limit ({hard}) leaves no room past 1024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    helpers = HelperPool(1)
    try:
        local = Local()
        files = _kept(tmp_path, True)
        assert helpers.scan(files, local) == scan_kept(files) and local.calls == 0
    finally:
        helpers.close()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_new_size_closes_the_old_helpers_and_a_forked_child_starts_none(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PTXGYM_SCAN_HELPERS", "1")
    first = scan_helpers.pool()
    assert first is not None
    scan_helpers.scan(_kept(tmp_path, True), Local())
    (pid,) = first.pids()
    monkeypatch.setenv("PTXGYM_SCAN_HELPERS", "2")
    assert scan_helpers.pool() is not first and first.pids() == []
    with pytest.raises(ChildProcessError):  # killed and reaped by the close
        os.waitpid(pid, os.WNOHANG)
    child = os.fork()
    if child == 0:  # the child: none of the parent's helpers is its own
        os._exit(0 if scan_helpers._pool is None else 1)
    assert os.waitpid(child, 0)[1] == 0


@pytest.mark.nvcc
@pytest.mark.slow  # one nvcc build
def test_a_timed_out_scan_refuses_the_build_and_is_not_cached(monkeypatch) -> None:
    """The refusal of a scan that ran out of time is not kept: a stalled host may have caused it."""
    from ptxgym.records.arch import HOPPER
    from ptxgym.records.schema import BuildSpec, Solution, SourceFile, SupportedLanguage

    kernels = Path(__file__).parents[1] / "kernels"
    files = {name: (kernels / name).read_text() for name in ("plain.cu", "plain_scale.cuh")}
    files["plain.cu"] += f"\n// {os.getpid()} {time.time()}\n"  # a key no earlier build has
    spec = BuildSpec(
        language=SupportedLanguage.CUDA,
        target_hardware=["sm_90a"],
        entry_point="plain.cu::scale_add",
        binding="tvm-ffi",
    )
    sources = [SourceFile(path=k, content=v) for k, v in files.items()]
    solution = Solution(name="t", definition="t", author="ptxgym-tests", spec=spec, sources=sources)
    refusal = scan_helpers.ScreenVerdict(False, TIMEOUT_RULE, "host-asm: the scan did not finish")
    calls = []
    monkeypatch.setattr(scan_helpers, "scan", lambda files, local: calls.append(files) or refusal)
    first = build.build_solution(solution, HOPPER)
    assert first.status is build.Status.STATIC_REJECT and first.message == refusal.message
    assert not first.cacheable
    again = build.build_solution(solution, HOPPER)
    assert not again.info.cache_hit and len(calls) == 2  # built and scanned again, not answered from disk


def test_the_backstop_goes_through_the_helpers_by_default(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("PTXGYM_SCAN_HELPERS", raising=False)
    seen = []
    real = scan_helpers.scan
    monkeypatch.setattr(scan_helpers, "scan", lambda files, local: seen.append(files) or real(files, local))
    for name in ("kernel.cudafe1.cpp", "kernel.ii", "kernel.s", "kernel_dlink.s"):
        (tmp_path / name).write_text("\t.text\n")
    (tmp_path / "kernel.cudafe1.cpp").write_text(HOSTILE)
    verdict = build._host_asm_backstop(tmp_path, ["src/kernel.cu"])
    assert verdict is not None and verdict.rule == "host-asm" and len(seen) == 1
    assert scan_helpers.pool() is not None  # the process's helpers exist by default


def test_zero_helpers_scan_in_this_process(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PTXGYM_SCAN_HELPERS", "0")
    assert scan_helpers.pool() is None
    local = Local()
    files = _kept(tmp_path, True)
    assert scan_helpers.scan(files, local) == scan_kept(files) and local.calls == 1


def test_the_setting_is_checked(monkeypatch) -> None:
    monkeypatch.delenv("PTXGYM_SCAN_HELPERS", raising=False)
    assert 1 <= settings.scan_helpers() <= 4
    monkeypatch.setenv("PTXGYM_SCAN_HELPERS", "3")
    assert settings.scan_helpers() == 3
    for bad in ("-1", "x", "65", "٣"):
        monkeypatch.setenv("PTXGYM_SCAN_HELPERS", bad)
        with pytest.raises(ValueError, match="PTXGYM_SCAN_HELPERS must be an integer from 0 to 64"):
            settings.scan_helpers()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_helpers_run_on_the_build_cores_off_the_timing_ones(tmp_path, monkeypatch) -> None:
    from ptxgym.confine import cores

    usable = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(cores, "_USABLE", frozenset(usable))
    monkeypatch.setattr(cores, "gpus", lambda: 1)
    monkeypatch.setattr(cores, "siblings", lambda cpu: {cpu})
    monkeypatch.setenv("PTXGYM_TIMING_CORES", "1")
    helpers = HelperPool(1)
    try:
        helper = helpers._take()
        assert helper is not None
        assert sorted(os.sched_getaffinity(helper.proc.pid)) == usable[:-1]
        helpers._give(helper)
        assert helpers.scan(_kept(tmp_path, True), Local()) == scan_kept(_kept(tmp_path, True))
    finally:
        helpers.close()
