"""The native runner on the CPU: a real g++ build of ``runner.cc`` and of a real TVM-FFI candidate.

The runner is driven through ``trusted/native_worker.NativeHandle`` with the worker's protocol
(``protocol.py`` commands and replies). Its blob is the CPU analogue of a guard-page blob
(``--host-blobs``): one memfd per run, mapped at its offset in a reserved range with an unmapped hole
between the runs. The candidate's entry ``run(a, b, c, alpha, mode)`` computes ``c = a + alpha * b``
over float32 arrays, and its ``mode`` scalar (one input set per mode) selects a misbehaviour: raise,
crash, print garbage, or write forged frames to the reply channel (the fd it finds on its own command
line, as a hostile candidate would), read /etc/passwd, spin forever, or abort.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
from pathlib import Path

import numpy as np
import pytest

from ptxgym.evaluation.child_errors import ProtocolViolation, WorkerDied, WorkerError, WorkerTimeout
from ptxgym.evaluation.protocol import (
    ApplySandbox,
    Attach,
    Call,
    Exit,
    Load,
    ScalarArg,
    TensorArg,
    TrialBegin,
    TrialEnd,
    VmmBlob,
    VmmRun,
)
from ptxgym.evaluation.runner import jail as runner_jail_module
from ptxgym.evaluation.runner.build import build_host_library, build_runner, plan
from ptxgym.evaluation.trusted.native_worker import NativeHandle, NativeSpec

pytestmark = pytest.mark.slow

N = 1024
PAGE = 4096
RUN = 3 * N * 4  # a, b, c in the first run
HOLE = PAGE  # an unmapped page between the runs
TOTAL = RUN + HOLE + PAGE  # the second run: one page nobody uses
MODES = 11  # input set k passes mode k

CANDIDATE = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

using tvm::ffi::TensorView;

static int reply_fd() {  // what a hostile candidate does: read the runner's own command line
  char buf[4096] = {0};
  FILE* f = std::fopen("/proc/self/cmdline", "rb");
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  for (size_t i = 0; i < n; i += std::strlen(buf + i) + 1)
    if (std::strcmp(buf + i, "--fd-out") == 0) return std::atoi(buf + i + std::strlen(buf + i) + 1);
  return -1;
}

static void frame(const std::string& body, unsigned len) {
  unsigned char head[4] = {(unsigned char)(len >> 24), (unsigned char)(len >> 16),
                           (unsigned char)(len >> 8), (unsigned char)len};
  int fd = reply_fd();
  (void)!write(fd, head, 4);
  (void)!write(fd, body.data(), body.size());
}

void run(TensorView a, TensorView b, TensorView c, double alpha, int64_t mode) {
  if (mode == 1) TVM_FFI_THROW(ValueError) << "candidate refuses: mode " << mode;
  if (mode == 2) *(volatile int*)nullptr = 1;
  if (mode == 8) {
    std::printf("about to abort\n");  // never flushed: reaches the log only if stdout is unbuffered
    std::abort();
  }
  if (mode == 3) {  // an oversized frame header to stdout, then text
    static const char g[] = "\x7f\xff\xff\xffgarbage";
    std::fwrite(g, 1, sizeof g - 1, stdout);
    std::fflush(stdout);
  }
  if (mode == 4) frame("", 0xFFFFFFFFu);
  if (mode == 5) { std::string b = "{\"seq\":99,\"ok\":true}"; frame(b, b.size()); }
  if (mode == 9) frame("not json", 8);
  if (mode == 6) {  // read a file the runner does not need
    FILE* f = std::fopen("/etc/passwd", "r");
    int err = errno;
    if (f) TVM_FFI_THROW(RuntimeError) << "read /etc/passwd";
    TVM_FFI_THROW(RuntimeError) << "denied: " << std::strerror(err);
  }
  if (mode == 7) for (volatile int spin = 0;; spin = spin + 1) {}
  if (mode == 10) {  // put a pipe of its own over the reply pipe (a relay could then rewrite every reply)
    int p[2];
    if (pipe(p) != 0) TVM_FFI_THROW(RuntimeError) << "pipe failed";
    int fd = reply_fd();
    int dup = dup2(p[1], fd) < 0 ? errno : 0;
    int closed = close(fd) < 0 ? errno : 0;
    TVM_FFI_THROW(RuntimeError) << "dup2: " << (dup ? std::strerror(dup) : "ok")
                                << "; close: " << (closed ? std::strerror(closed) : "ok");
  }
  TVM_FFI_ICHECK_EQ(a.dtype().bits, 32);
  const float* x = static_cast<const float*>(a.data_ptr());
  const float* y = static_cast<const float*>(b.data_ptr());
  float* z = static_cast<float*>(c.data_ptr());
  for (int64_t i = 0; i < a.numel(); ++i) z[i] = x[i] + float(alpha) * y[i];
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
"""


@pytest.fixture(scope="module")
def runner_bin(tmp_path_factory) -> Path:
    return build_runner(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def candidate(tmp_path_factory) -> Path:
    return build_host_library(CANDIDATE, tmp_path_factory.mktemp("cand"))


@pytest.fixture
def blob():
    """Two memfd runs: a (ramp), b (ones), c (zeros) in the first; the trusted side's mapping of it."""
    fds = [os.memfd_create("ptxgym-run0"), os.memfd_create("ptxgym-run1")]
    os.ftruncate(fds[0], RUN)
    os.ftruncate(fds[1], PAGE)
    view = mmap.mmap(fds[0], RUN)
    arrays = np.frombuffer(view, dtype=np.float32).reshape(3, N)
    arrays[0] = np.arange(N, dtype=np.float32)
    arrays[1] = 1.0
    yield fds, arrays
    for fd in fds:
        os.close(fd)  # the mapping goes with the arrays (numpy holds the buffer)


def cpu_spec(runner_bin: Path) -> NativeSpec:
    """A CPU runner (host blobs); its jail reads the libcupti it links, if it links one."""
    return NativeSpec(runner_bin, 0, None, runner_jail_module.cupti_files(plan().cupti_lib))


def spawn(runner_bin: Path, log_dir: Path, sandboxed: bool = False) -> NativeHandle:
    handle = NativeHandle(cpu_spec(runner_bin), log_dir, sandboxed)
    handle.hello = handle.receive(30.0)
    return handle


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_a_runner_taken_moves_with_all_its_threads_to_the_timing_cores(runner_bin, tmp_path) -> None:
    from ptxgym.confine import cores

    usable = sorted(os.sched_getaffinity(0))
    h = spawn(runner_bin, tmp_path)
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{h.proc.pid}/task")]
        assert all(sorted(os.sched_getaffinity(t)) == usable for t in tids)  # a spare: anywhere
        assert cores.pin_process(h.proc.pid, (usable[-1],))
        tids = [int(t) for t in os.listdir(f"/proc/{h.proc.pid}/task")]
        assert all(sorted(os.sched_getaffinity(t)) == [usable[-1]] for t in tids), tids
        assert h.hello.ok
    finally:
        h.kill()
    assert not cores.pin_process(h.proc.pid, (usable[-1],))  # gone


@pytest.fixture
def handle(runner_bin, tmp_path):
    h = spawn(runner_bin, tmp_path)
    yield h
    h.kill()


def arg_set(alpha: float = 2.0, mode: int = 0, offset_c: int = 2 * N * 4) -> list:
    def t(role, off):
        return TensorArg(role=role, offset=off, shape=(N,), dtype="float32")

    return [t("in", 0), t("in", N * 4), t("out", offset_c), ScalarArg(value=alpha), ScalarArg(value=mode)]


SETS = [arg_set(alpha=2.0, mode=k) for k in range(MODES)]
VMM = VmmBlob(total=TOTAL, page=PAGE, runs=[VmmRun(offset=0, size=RUN), VmmRun(offset=RUN + HOLE, size=PAGE)])


def attach(handle, blob, sets=None):
    fds, _ = blob
    cmd = Attach(arena="a1", blob=None, vmm=VMM, sets=sets or SETS, flush_bytes=0, cupti=False)
    return handle.request(cmd, 30.0, fds=fds)


def ready(handle, blob, candidate, entry: str = "run", sets=None):
    reply = attach(handle, blob, sets)
    assert reply.ok and reply.attach is not None and reply.attach.arena == "a1", reply
    sandbox = handle.request(ApplySandbox(mode="on", scratch=str(handle.scratch)), 30.0)
    assert sandbox.ok and sandbox.sandbox is not None, sandbox
    return handle.request(Load(kind="so", path=str(candidate), entry=entry), 30.0)


def call(handle, index: int, timeout_s: float = 30.0):
    return handle.request(Call(set=index), timeout_s)


def test_an_attach_may_ask_for_the_counter_query(handle, blob):
    """``Attach.hw_prepare`` is accepted, and the sandbox step that may ask again after it works.

    A host blob has no GPU to query: nothing happens there, the runner only parses the field.
    """
    fds, _ = blob
    cmd = Attach(
        arena="a1",
        blob=None,
        vmm=VMM,
        sets=SETS,
        flush_bytes=0,
        cupti=False,
        hw_prepare=True,
        hw_prepare_attempts=2,
    )
    reply = handle.request(cmd, 30.0, fds=fds)
    assert reply.ok and reply.attach is not None and reply.attach.arena == "a1", reply
    sandbox = handle.request(ApplySandbox(mode="on", scratch=str(handle.scratch), hw_prepare=True), 30.0)
    assert sandbox.ok and sandbox.sandbox is not None, sandbox


def test_an_attach_reports_the_wall_of_its_steps(handle, blob):
    """``AttachResult.phases_ms``: the runner's own walls of its attach (a spare's warm-up, diagnostic).

    A host blob has no CUDA steps: only the mapping and the sets; on a GPU also cuda, flush, cupti and
    hw_prepare (``protocol.ATTACH_PHASES``). Only those steps reach a verdict's walls.
    """
    from ptxgym.evaluation.protocol import ATTACH_PHASES
    from ptxgym.evaluation.trusted.local import attach_phases

    reply = attach(handle, blob)
    assert reply.ok and reply.attach is not None, reply
    phases = reply.attach.phases_ms
    assert set(phases) == {"map", "sets"} and set(phases) <= set(ATTACH_PHASES), phases
    assert all(v >= 0 for v in phases.values())
    walls = attach_phases({**phases, "chosen by the runner": 1.0})
    assert set(walls) == {"spare_attach_map", "spare_attach_sets"}, walls


def test_hello_names_the_process(handle):
    hello = handle.hello.hello
    assert hello is not None and hello.pid == handle.pid and hello.torch == "" and hello.runner


def test_call_writes_the_shared_blob(handle, blob, candidate):
    assert ready(handle, blob, candidate).ok
    reply = call(handle, 0)
    assert reply.ok and reply.call is not None and reply.call.host_ms >= 0, reply
    _, arrays = blob
    np.testing.assert_array_equal(arrays[2], np.arange(N, dtype=np.float32) + 2.0)
    assert handle.request(Exit(), 10.0).ok
    assert handle.proc.wait(timeout=5) == 0


def test_a_hardware_counted_call_on_host_blobs_runs_and_says_why_no_counters(handle, blob, candidate):
    """``Call.hw_count`` in the runner's CPU path: the call still runs; the reply has a reason, no counts."""
    assert ready(handle, blob, candidate).ok
    _, arrays = blob
    arrays[2][:] = 0
    reply = handle.request(Call(set=0, hw_count=True), 30.0)
    assert reply.ok and reply.hw_counts is None, reply
    assert reply.hw_count_error.startswith("HwCountError: a host blob"), reply.hw_count_error
    np.testing.assert_array_equal(arrays[2], np.arange(N, dtype=np.float32) + 2.0)
    plain = call(handle, 0)  # and the runner serves on, plain calls unchanged
    assert plain.ok and plain.call is not None and plain.hw_count_error == "" and plain.hw_counts is None


def test_trials_answer_with_empty_spans_without_cupti(handle, blob, candidate):
    assert ready(handle, blob, candidate).ok
    assert handle.request(TrialBegin(cupti=True), 10.0).ok
    assert call(handle, 0).ok
    end = handle.request(TrialEnd(), 10.0)
    assert end.ok and end.spans is not None and end.spans.spans == {}, end


def test_the_candidate_is_loaded_from_a_copy_in_scratch(handle, blob, candidate):
    assert ready(handle, blob, candidate).ok
    maps = Path(f"/proc/{handle.pid}/maps").read_text()
    assert str(handle.scratch / "candidate-1.so") in maps and str(candidate) not in maps


def test_no_interpreter_or_vendor_library_mapped(handle, blob, candidate):
    assert ready(handle, blob, candidate).ok
    maps = Path(f"/proc/{handle.pid}/maps").read_text()
    assert "libtvm_ffi" in maps
    for banned in ("libpython", "libtorch", "libcublas", "libcudnn", "libcuda.so"):
        assert banned not in maps, f"{banned} is mapped into the runner"


def test_missing_symbol_is_an_error_reply(handle, blob, candidate):
    reply = ready(handle, blob, candidate, entry="nope")
    assert not reply.ok and "loading 'nope' failed" in reply.error and "__tvm_ffi_nope" in reply.error
    # its constructors ran: it counts as loaded (no second load, no attach), and no call runs a null entry
    assert not handle.request(Load(kind="so", path=str(candidate), entry="run"), 30.0).ok
    failed = call(handle, 0)
    assert not failed.ok and "no subject is loaded" in failed.error, failed


def test_candidate_exception_is_an_error_reply(handle, blob, candidate):
    assert ready(handle, blob, candidate).ok
    reply = call(handle, 1)
    assert not reply.ok and reply.error.startswith("ValueError: candidate refuses: mode 1")
    assert call(handle, 0).ok  # the runner is still serving


def test_crash_is_seen_as_death(handle, blob, candidate):
    assert ready(handle, blob, candidate).ok
    with pytest.raises(WorkerDied, match="SIGSEGV") as info:
        call(handle, 2)
    assert info.value.returncode == -11
    assert "Segfault encountered" in info.value.log_tail  # libtvm_ffi's handler printed a backtrace


def test_output_before_an_abort_reaches_the_log(handle, blob, candidate):
    assert ready(handle, blob, candidate).ok
    with pytest.raises(WorkerDied, match="SIGABRT") as info:
        call(handle, 8)
    assert "about to abort" in info.value.log_tail


def test_stdout_garbage_stays_off_the_reply_channel(handle, blob, candidate):
    assert ready(handle, blob, candidate).ok
    assert call(handle, 3).ok
    handle.output.settle(0.5)
    assert "garbage" in handle.log_tail()


def test_oversized_forged_frame_is_a_violation(handle, blob, candidate):
    assert ready(handle, blob, candidate).ok
    with pytest.raises(ProtocolViolation, match="oversized"):
        call(handle, 4)


@pytest.mark.parametrize(("mode", "message"), [(5, "command 99"), (9, "malformed reply")])
def test_forged_reply_in_bounds_is_a_violation(handle, blob, candidate, mode, message):
    assert ready(handle, blob, candidate).ok
    with pytest.raises(ProtocolViolation, match=message):
        call(handle, mode)


def test_views_outside_the_mapped_runs_are_refused(handle, blob):
    """A view reaching into the hole between the runs is refused at attach, before any call."""
    reply = attach(handle, blob, [arg_set(offset_c=RUN - 4)])
    assert not reply.ok and "not inside a mapped run" in reply.error
    reply = attach(handle, blob, [arg_set(offset_c=RUN + HOLE + 4)])  # runs past the second run's end
    assert not reply.ok and "not inside a mapped run" in reply.error
    reply = attach(handle, blob, [arg_set(offset_c=RUN + HOLE)])  # the whole second run: allowed
    assert reply.ok and reply.attach is not None and not reply.attach.cupti, reply


def test_a_plain_blob_is_refused(handle):
    """An arena without guard pages (a CUDA-IPC tensor) needs the Python worker."""
    reply = handle.request(Attach(arena="a1", blob=None, sets=SETS, flush_bytes=0), 10.0)
    assert not reply.ok and "only guard-page blobs" in reply.error and "Python worker" in reply.error


def test_order_of_commands_is_enforced(handle, blob, candidate):
    reply = call(handle, 0)
    assert not reply.ok and reply.error == "call before load"
    assert attach(handle, blob).ok
    load = handle.request(Load(kind="so", path=str(candidate), entry="run"), 10.0)
    assert not load.ok and load.error.startswith("refusing to load a candidate before the 'sandbox' command")
    assert handle.request(Load(kind="noop"), 10.0).ok  # calibration's subject is allowed before
    baseline = handle.request(Load(kind="baseline", function="gemm"), 10.0)
    assert not baseline.ok and "Python worker" in baseline.error
    assert handle.request(ApplySandbox(mode="off", scratch=str(handle.scratch)), 10.0).ok
    again = handle.request(ApplySandbox(mode="off", scratch=str(handle.scratch)), 10.0)
    assert not again.ok and "already applied" in again.error
    with pytest.raises(WorkerError, match="stopped reading|broke|closed"):  # the fd socket is closed
        attach(handle, blob)


def test_a_malformed_command_is_an_error_reply_and_the_runner_serves_on(handle, blob, candidate):
    assert ready(handle, blob, candidate).ok
    handle.seq += 1
    handle._to.send_bytes(b'{"op": "call", "seq": ' + str(handle.seq).encode() + b', "set": "x"}')
    handle.pending.append(handle.seq)
    reply = handle.receive(10.0)
    assert not reply.ok and "set must be an integer" in reply.error
    assert call(handle, 0).ok


def test_gpu_attach_without_a_driver_is_an_error_reply(runner_bin, tmp_path, blob):
    """The GPU path on a host with no usable driver: a clear error, the runner serves on."""
    spec = NativeSpec(runner_bin, 0, runner_jail_module.GpuFiles(libcuda=tmp_path / "libcuda.so.1"))
    h = NativeHandle(spec, tmp_path)
    try:
        h.hello = h.receive(30.0)
        reply = attach(h, blob)
        assert not reply.ok, reply
        assert any(w in reply.error for w in ("libcuda.so.1", "without CUDA", "failed: CUDA_ERROR")), reply
        assert h.request(Exit(), 10.0).ok
    finally:
        h.kill()


def test_hang_is_a_timeout(handle, blob, candidate):
    assert ready(handle, blob, candidate).ok
    with pytest.raises(WorkerTimeout):
        call(handle, 7, timeout_s=1.0)


def test_unconfined_candidate_reads_any_file(handle, blob, candidate):
    """The probe of the next test works: without a jail the candidate reads /etc/passwd."""
    assert ready(handle, blob, candidate).ok
    reply = call(handle, 6)
    assert not reply.ok and reply.error == "RuntimeError: read /etc/passwd"


def test_confined_runner_reads_only_what_it_needs(runner_bin, blob, candidate, tmp_path):
    jailed = spawn(runner_bin, tmp_path, sandboxed=True)
    try:
        assert ready(jailed, blob, candidate).ok
        assert jailed.request(Call(set=0), 10.0).ok
        np.testing.assert_array_equal(blob[1][2], np.arange(N, dtype=np.float32) + 2.0)
        reply = call(jailed, 6)
        assert not reply.ok and reply.error == "RuntimeError: denied: Permission denied", reply
        relay = call(jailed, 10)  # its protocol pipes can be neither replaced nor closed (seccomp)
        expected = "RuntimeError: dup2: Operation not permitted; close: Operation not permitted"
        assert not relay.ok and relay.error == expected, relay
        assert jailed.request(Call(set=0), 10.0).ok  # and the runner serves on
        assert "libpython" not in Path(f"/proc/{jailed.pid}/maps").read_text()  # the launcher exec'd
    finally:
        jailed.kill()


def test_the_sandbox_report_says_what_is_in_force(runner_bin, blob, tmp_path):
    jailed = spawn(runner_bin, tmp_path, sandboxed=True)
    free = spawn(runner_bin, tmp_path)
    try:
        for h in (jailed, free):
            assert attach(h, blob).ok
        report = jailed.request(ApplySandbox(mode="on", scratch=str(jailed.scratch)), 10.0).sandbox
        assert report is not None and report.mode == "on"
        states = {layer.name: layer.state for layer in report.layers}
        layers = ("no_new_privs", "network", "filesystem", "rlimits", "environment")
        assert states == {k: "active" for k in layers}
        strict = free.request(ApplySandbox(mode="strict", scratch=str(free.scratch)), 10.0)
        assert not strict.ok and "strict sandbox: layer no_new_privs is not in force" in strict.error
    finally:
        jailed.kill()
        free.kill()


def test_a_runner_its_jail_cannot_start_is_seen_as_death(runner_bin, tmp_path, monkeypatch):
    real = runner_jail_module.runner_jail

    def no_execute(binary, scratch, gpu=None, libs=()):
        jail = real(binary, scratch, gpu, libs)
        return dataclasses.replace(jail, landlock=dataclasses.replace(jail.landlock, execute=()))

    monkeypatch.setattr("ptxgym.evaluation.trusted.native_worker.runner_jail", no_execute)
    h = NativeHandle(cpu_spec(runner_bin), tmp_path, sandboxed=True, at_exec=True)
    try:
        with pytest.raises(WorkerDied, match="exit code 127") as info:
            h.receive(30.0)
        assert "ptxgym-jail: cannot run" in info.value.log_tail
    finally:
        h.kill()


def test_a_jail_the_runner_cannot_apply_fails_the_sandbox_and_no_candidate_loads(
    runner_bin, blob, candidate, tmp_path, monkeypatch
):
    """A jail error at the sandbox command (``runner/confine.h``) refuses the sandbox; nothing loads.

    The evaluator then falls back to the Python worker, before any candidate code exists.
    """
    real = runner_jail_module.runner_jail

    def bad_limit(binary, scratch, gpu=None, libs=()):
        jail = real(binary, scratch, gpu, libs)
        return dataclasses.replace(jail, rlimits={**jail.rlimits, "RLIMIT_NOSUCH": 1})

    monkeypatch.setattr("ptxgym.evaluation.trusted.native_worker.runner_jail", bad_limit)
    h = NativeHandle(cpu_spec(runner_bin), tmp_path, sandboxed=True)
    try:
        assert h.receive(30.0).hello is not None
        assert attach(h, blob).ok
        reply = h.request(ApplySandbox(mode="on", scratch=str(h.scratch)), 10.0)
        assert (
            not reply.ok and "could not confine itself: unknown resource limit RLIMIT_NOSUCH" in reply.error
        )
        refused = h.request(Load(kind="so", path=str(candidate), entry="run"), 10.0)
        assert not refused.ok and "before the 'sandbox' command" in refused.error
    finally:
        h.kill()


def test_the_jail_applied_at_the_sandbox_command_is_what_the_launcher_would_apply(runner_bin, blob, tmp_path):
    """Before the sandbox command the runner reads /etc/passwd (no jail from exec); after it, not."""
    h = NativeHandle(cpu_spec(runner_bin), tmp_path, sandboxed=True)
    try:
        assert h.receive(30.0).hello is not None
        assert "NoNewPrivs:\t0" in Path(f"/proc/{h.pid}/status").read_text()  # no jail from exec
        assert attach(h, blob).ok
        report = h.request(ApplySandbox(mode="on", scratch=str(h.scratch)), 10.0).sandbox
        assert report is not None
        details = {layer.name: layer.detail for layer in report.layers}
        assert (
            "the sandbox command" in details["filesystem"] and "/etc/passwd refused" in details["filesystem"]
        )
        assert "NoNewPrivs:\t1" in Path(f"/proc/{h.pid}/status").read_text()
        assert "Seccomp:\t2" in Path(f"/proc/{h.pid}/status").read_text()
    finally:
        h.kill()


def test_a_pool_of_runners_hands_out_warm_primed_spares(runner_bin, blob, candidate, tmp_path):
    """``WorkerPool(factory=...)``: spares are runners, primed with an attach before they are taken."""
    from ptxgym.evaluation.trusted.pool import WorkerPool

    spec = cpu_spec(runner_bin)
    pool = WorkerPool(0, 1, log_dir=tmp_path, factory=lambda d, sandboxed: NativeHandle(spec, d, sandboxed))
    fds, arrays = blob
    cmd = Attach(arena="a1", blob=None, vmm=VMM, sets=SETS, flush_bytes=0, cupti=False)
    pool.primer = lambda h: h.send(cmd, None, fds)
    try:
        pool.fill()
        handle = pool.take()
        assert isinstance(handle, NativeHandle) and len(pool._ready) == 1  # the spare was replaced
        hello, attached = handle.drain(30.0)
        assert hello.hello is not None and hello.hello.runner and attached.attach is not None, attached
        assert handle.request(ApplySandbox(mode="off", scratch=str(handle.scratch)), 10.0).ok
        assert handle.request(Load(kind="so", path=str(candidate), entry="run"), 10.0).ok
        assert handle.request(Call(set=0), 10.0).ok
        np.testing.assert_array_equal(arrays[2], np.arange(N, dtype=np.float32) + 2.0)
        handle.discard()
        assert not handle.scratch.exists() and handle.proc.poll() is not None
    finally:
        pool.close()


def test_landlock_from_exec_and_the_rest_at_the_sandbox_command(runner_bin, blob, candidate, tmp_path):
    """``at_exec="landlock"``: Landlock before exec, seccomp and rlimits at the sandbox command.

    Every later thread is inside Landlock; the report says so, and the candidate reads nothing outside.
    """
    h = NativeHandle(cpu_spec(runner_bin), tmp_path, sandboxed=True, at_exec="landlock")
    try:
        assert h.landlock_at_exec and h.jail is not None and h.jail.landlock is None
        assert h.receive(30.0).hello is not None
        status = Path(f"/proc/{h.pid}/status").read_text()
        assert "NoNewPrivs:\t1" in status and "Seccomp:\t0" in status  # Landlock only, from exec
        assert attach(h, blob).ok
        report = h.request(ApplySandbox(mode="strict", scratch=str(h.scratch)), 10.0).sandbox
        assert report is not None
        states = {layer.name: layer.state for layer in report.layers}
        assert states == {
            k: "active" for k in ("no_new_privs", "network", "filesystem", "rlimits", "environment")
        }
        details = {layer.name: layer.detail for layer in report.layers}
        assert "from exec on, before the driver started any thread" in details["filesystem"]
        assert "Seccomp:\t2" in Path(f"/proc/{h.pid}/status").read_text()
        assert h.request(Load(kind="so", path=str(candidate), entry="run"), 10.0).ok
        reply = call(h, 6)
        assert not reply.ok and reply.error == "RuntimeError: denied: Permission denied", reply
    finally:
        h.kill()


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_trial_may_ask_the_runner_to_spin_for_its_next_command(handle, blob, candidate):
    """``TrialBegin.spin_us``: within a trial the runner polls for each next command, then blocks.

    Four 0.15 s gaps between calls: with 50 ms of spinning the runner burns CPU for about 0.2 s; without
    it, and after the trial's end, it sleeps in its read.
    """
    import time

    assert ready(handle, blob, candidate).ok

    def gaps() -> float:
        before = _cpu_s(handle.pid)
        for _ in range(4):
            time.sleep(0.15)
            assert call(handle, 0).ok
        return _cpu_s(handle.pid) - before

    assert handle.request(TrialBegin(cupti=False, spin_us=50_000), 30.0).ok
    spun = gaps()
    assert handle.request(TrialEnd(), 30.0).ok
    after = gaps()
    assert handle.request(TrialBegin(cupti=False), 30.0).ok
    blocked = gaps()
    assert spun >= 0.08, spun
    assert after < 0.05 and blocked < 0.05, (after, blocked)
