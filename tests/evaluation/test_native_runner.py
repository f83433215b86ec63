"""The native runner on the CPU: a real g++ build of ``runner.cc`` and of a real TVM-FFI candidate.

The candidate's entry ``run(a, b, c, alpha, mode)`` computes ``c = a + alpha * b`` over float32 arrays of
a memfd blob, and its ``mode`` scalar selects a misbehaviour: raise, crash, print garbage, or write
forged frames to the reply channel (the fd it finds on its own command line, as a hostile candidate
would), read /etc/passwd, spin forever, or abort.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ptxgym.evaluation.runner import wire
from ptxgym.evaluation.runner.build import build_runner
from ptxgym.evaluation.runner.client import (
    ProtocolViolation,
    RunnerClient,
    RunnerDied,
    RunnerError,
    RunnerTimeout,
)
from ptxgym.evaluation.runner.jail import runner_jail

pytestmark = pytest.mark.slow

N = 1024
BLOB = 3 * N * 4

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
    import tvm_ffi.libinfo as info

    out = tmp_path_factory.mktemp("cand")
    (out / "cand.cc").write_text(CANDIDATE)
    lib_dir = Path(info.find_libtvm_ffi()).parent
    cmd = ["g++", "-std=c++17", "-O1", "-shared", "-fPIC", f"-I{info.find_include_path()}"]
    cmd += [f"-I{info.find_dlpack_include_path()}", str(out / "cand.cc"), "-o", str(out / "cand.so")]
    cmd += [f"-L{lib_dir}", "-ltvm_ffi", f"-Wl,-rpath,{lib_dir}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out / "cand.so"


@pytest.fixture
def blob():
    """A memfd holding a (ramp), b (ones), c (zeros) and the trusted side's mapping of it."""
    fd = os.memfd_create("ptxgym-blob")
    os.ftruncate(fd, BLOB)
    view = mmap.mmap(fd, BLOB)
    arrays = np.frombuffer(view, dtype=np.float32).reshape(3, N)
    arrays[0] = np.arange(N, dtype=np.float32)
    arrays[1] = 1.0
    yield fd, arrays
    os.close(fd)  # the mapping goes with the arrays (numpy holds the buffer)


@pytest.fixture
def client(runner_bin, tmp_path):
    c = RunnerClient(runner_bin, tmp_path)
    yield c
    c.kill()


def args(alpha: float = 2.0, mode: int = 0, offset_c: int = 2 * N * 4) -> list:
    def t(role, off):
        return wire.TensorArg(role=role, offset=off, shape=(N,), dtype="float32", device="cpu")

    scalars = [wire.ScalarArg(value=alpha), wire.ScalarArg(value=mode)]
    return [t("in", 0), t("in", N * 4), t("out", offset_c), *scalars]


def ready(client, blob, candidate, entry: str = "run") -> wire.Reply:
    fd, _ = blob
    attach = client.request(wire.Attach(blob=wire.MemfdBlob(size=BLOB)), fds=[fd])
    assert attach.ok and attach.attach and attach.attach.device == "cpu", attach
    return client.request(wire.Load(path=str(candidate), entry=entry))


def test_hello_names_the_process(client):
    assert client.hello is not None and client.hello.pid == client.pid


def test_call_writes_the_shared_blob(client, blob, candidate):
    assert ready(client, blob, candidate).ok
    reply = client.request(wire.Call(args=args(alpha=2.0)))
    assert reply.ok and reply.call is not None and reply.call.ev_ms is None, reply
    _, arrays = blob
    np.testing.assert_array_equal(arrays[2], np.arange(N, dtype=np.float32) + 2.0)
    assert client.request(wire.Exit()).ok
    assert client.proc.wait(timeout=5) == 0


def test_no_interpreter_or_vendor_library_mapped(client, blob, candidate):
    assert ready(client, blob, candidate).ok
    maps = Path(f"/proc/{client.pid}/maps").read_text()
    assert str(candidate) in maps and "libtvm_ffi" in maps
    for banned in ("libpython", "libtorch", "libcublas", "libcudnn", "libcuda.so"):
        assert banned not in maps, f"{banned} is mapped into the runner"


def test_missing_symbol_is_an_error_reply(client, blob, candidate):
    reply = ready(client, blob, candidate, entry="nope")
    assert not reply.ok and reply.error and "__tvm_ffi_nope" in reply.error


def test_candidate_exception_is_an_error_reply(client, blob, candidate):
    assert ready(client, blob, candidate).ok
    reply = client.request(wire.Call(args=args(mode=1)))
    assert not reply.ok and reply.error and reply.error.startswith("ValueError: candidate refuses: mode 1")
    assert client.request(wire.Call(args=args(alpha=3.0))).ok  # the runner is still serving


def test_crash_is_seen_as_death(client, blob, candidate):
    assert ready(client, blob, candidate).ok
    with pytest.raises(RunnerDied, match="SIGSEGV") as info:
        client.request(wire.Call(args=args(mode=2)))
    assert info.value.returncode == -11
    assert "Segfault encountered" in info.value.log_tail  # libtvm_ffi's handler printed a backtrace


def test_output_before_an_abort_reaches_the_log(client, blob, candidate):
    assert ready(client, blob, candidate).ok
    with pytest.raises(RunnerDied, match="SIGABRT") as info:
        client.request(wire.Call(args=args(mode=8)))
    assert "about to abort" in info.value.log_tail


def test_stdout_garbage_stays_off_the_reply_channel(client, blob, candidate):
    assert ready(client, blob, candidate).ok
    assert client.request(wire.Call(args=args(mode=3))).ok
    assert "garbage" in client.log_tail()


def test_oversized_forged_frame_is_a_violation(client, blob, candidate):
    assert ready(client, blob, candidate).ok
    with pytest.raises(ProtocolViolation, match="exceeds"):
        client.request(wire.Call(args=args(mode=4)))


@pytest.mark.parametrize(("mode", "message"), [(5, "command 99"), (9, "malformed reply")])
def test_forged_reply_in_bounds_is_a_violation(client, blob, candidate, mode, message):
    assert ready(client, blob, candidate).ok
    with pytest.raises(ProtocolViolation, match=message):
        client.request(wire.Call(args=args(mode=mode)))


def test_views_outside_the_blob_are_refused(client, blob, candidate):
    assert ready(client, blob, candidate).ok
    reply = client.request(wire.Call(args=args(offset_c=BLOB - 4)))
    assert not reply.ok and reply.error and "not inside a mapped run" in reply.error
    wrong_device = [a.model_copy(update={"device": "cuda"}) for a in args()[:3]] + args()[3:]
    reply = client.request(wire.Call(args=wrong_device))
    assert not reply.ok and reply.error and "differs from the attached blob" in reply.error


def test_order_of_commands_is_enforced(client, blob, candidate):
    reply = client.request(wire.Call(args=args()))
    assert not reply.ok and reply.error == "call before load"
    assert ready(client, blob, candidate).ok
    again = client.request(wire.Attach(blob=wire.MemfdBlob(size=BLOB)))
    assert not again.ok and again.error == "attach after load is refused"
    fd, _ = blob
    with pytest.raises(RunnerError, match="closed its fd socket"):  # the candidate's runner gets no fds
        client.request(wire.Attach(blob=wire.MemfdBlob(size=BLOB)), fds=[fd])


def test_gpu_attach_without_a_driver_is_an_error_reply(client, blob, runner_bin):
    """The GPU path's first step on a host with no usable driver: a clear error, the runner serves on."""
    fd, _ = blob
    spec = wire.GpuBlob(device=0, total=2 << 21, page=2 << 20, runs=[wire.Run(offset=0, size=2 << 20)])
    reply = client.request(wire.Attach(blob=spec), fds=[fd])
    assert not reply.ok and reply.error, reply
    assert any(word in reply.error for word in ("libcuda.so.1", "without CUDA", "failed: CUDA_ERROR")), reply
    assert client.request(wire.Attach(blob=wire.MemfdBlob(size=BLOB)), fds=[fd]).ok


def test_hang_is_a_timeout(client, blob, candidate):
    assert ready(client, blob, candidate).ok
    with pytest.raises(RunnerTimeout):
        client.request(wire.Call(args=args(mode=7)), timeout_s=1.0)


def test_unconfined_candidate_reads_any_file(client, blob, candidate):
    """The probe of the next test works: without a jail the candidate reads /etc/passwd."""
    assert ready(client, blob, candidate).ok
    reply = client.request(wire.Call(args=args(mode=6)))
    assert not reply.ok and reply.error == "RuntimeError: read /etc/passwd"


def test_confined_runner_reads_only_what_it_needs(runner_bin, blob, candidate, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    inside = Path(shutil.copy(candidate, scratch / "cand.so"))
    jailed = RunnerClient(runner_bin, tmp_path, jail=runner_jail(runner_bin, scratch), cwd=scratch)
    try:
        assert jailed.hello is not None, jailed.log_tail()
        assert ready(jailed, blob, inside).ok
        assert jailed.request(wire.Call(args=args(alpha=0.5))).ok
        np.testing.assert_array_equal(blob[1][2], np.arange(N, dtype=np.float32) + 0.5)
        reply = jailed.request(wire.Call(args=args(mode=6)))
        assert not reply.ok and reply.error == "RuntimeError: denied: Permission denied", reply
        assert "libpython" not in Path(f"/proc/{jailed.pid}/maps").read_text()  # the launcher exec'd
    finally:
        jailed.kill()


def test_a_runner_its_jail_cannot_start_is_seen_as_death(runner_bin, tmp_path):
    jail = runner_jail(runner_bin, tmp_path)
    rules = dataclasses.replace(jail.landlock, execute=())  # the runner itself may not be executed
    with pytest.raises(RunnerDied, match="exit code 127") as info:
        RunnerClient(runner_bin, tmp_path, jail=dataclasses.replace(jail, landlock=rules))
    assert "ptxgym-jail: cannot run" in info.value.log_tail
