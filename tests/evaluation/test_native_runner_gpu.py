"""The native runner on the GPU (written on a CPU host; run by the lead on the H200).

1. ``test_runner_on_a_guard_page_blob``: the trusted side (this process) builds a guard-page blob
   (``evaluation/vmm.py``: one run, an unmapped page after it), and a ``NativeHandle`` runner, plain or
   jailed (``runner/jail.py`` with the GPU files resolved from this process's maps), attaches it, applies
   the sandbox, loads an nvcc-built candidate (``-cudart shared``, as ``ptxgym.cpu.build`` links) and
   calls it. The candidate's scalar picks what it does: an axpy on TVM-FFI's stream, ``dlopen`` of
   libcublas (from the directory of libcupti when it is there), reading ``/etc/passwd``, or reading it
   from the driver's helper threads (a signal handler sent to each). Plain, the probes succeed (so they
   can fail); jailed, all are refused, and no interpreter, torch or cuBLAS is mapped in the runner after
   the load.
2. ``test_expert_gemm_native_and_python``: the shipped expert GEMM through one ``LocalGpuEvaluator``
   with ``candidate_process="native"``: PASSED in the runner with in-band target counts, then in the
   Python worker (same arena and baseline): speedups within 3 %. Needs the runner's CUPTI path
   (``cupti_path.h`` merged, libcupti found); without it the evaluator falls back to the worker and the
   test fails saying so.
3. ``test_hostile_kernels_in_the_runner``: audit corpus kernels (a no-op: a wrong result; a device
   reset: the lost-context check; a read past A: the guard page faults in the runner) judged in the
   runner with the statuses the audit expects.
4. ``test_expert_gemm_hardware_counters_in_the_runner``: the expert GEMM's hardware-counted call (CUPTI's
   range profiler, ``runner/cupti_range.h``): its wgmma count equals the SASS-counted call's and its TMA
   loads moved at least the task's minimal traffic (``TargetInfo.tma_share`` >= 1).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ptxgym.evaluation.protocol import (
    ApplySandbox,
    Attach,
    Call,
    Load,
    ScalarArg,
    TensorArg,
    VmmBlob,
    VmmRun,
)

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

N = 4096
ROOT = Path(__file__).resolve().parents[2]
GEMM = ROOT / "knowledge_packs" / "sm90a" / "solutions" / "Gemm.cu"

KERNEL = r"""
#include <cuda_runtime.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

using tvm::ffi::TensorView;

__global__ void axpy(const float* x, const float* y, float* z, float alpha, int64_t n) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) z[i] = x[i] + alpha * y[i];
}

static std::atomic<int> ran{0}, opened{0};
static void try_passwd(int) {
  ran.fetch_add(1);
  int fd = open("/etc/passwd", O_RDONLY);
  if (fd >= 0) { opened.fetch_add(1); close(fd); }
}

// Run try_passwd on every other thread: SIGUSR2 through sigaction, and glibc's own signal 32 through the
// raw call (which a thread cannot block with pthread_sigmask), borrowing glibc's return trampoline.
static void hijack_threads() {
  struct sigaction act {};
  act.sa_handler = try_passwd;
  sigemptyset(&act.sa_mask);
  sigaction(SIGUSR2, &act, nullptr);
  struct { void (*h)(int); unsigned long flags; void (*r)(); unsigned long long mask; } k{};
  syscall(SYS_rt_sigaction, SIGUSR2, nullptr, &k, 8);
  syscall(SYS_rt_sigaction, 32, &k, nullptr, 8);
  int sent = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      int tid = atoi(e->d_name);
      if (tid <= 0 || tid == static_cast<int>(syscall(SYS_gettid))) continue;
      sent += syscall(SYS_tgkill, getpid(), tid, SIGUSR2) == 0;
      sent += syscall(SYS_tgkill, getpid(), tid, 32) == 0;
    }
    closedir(d);
  }
  usleep(300000);
  if (opened.load()) TVM_FFI_THROW(RuntimeError) << "read /etc/passwd from another thread";
  TVM_FFI_THROW(RuntimeError) << "threads denied: " << sent << " signals sent, " << ran.load() << " handled";
}

void run(TensorView a, TensorView b, TensorView c, double alpha, int64_t mode) {
  if (mode == 3) hijack_threads();
  if (mode == 1) {  // reading the file is what dlopen needs first; then the dlopen itself
    FILE* f = std::fopen(CUBLAS_PATH, "rb");
    int err = errno;
    if (!f) TVM_FFI_THROW(RuntimeError) << "cublas denied: " << std::strerror(err);
    std::fclose(f);
    void* h = dlopen(CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
    if (h) TVM_FFI_THROW(RuntimeError) << "opened cublas";
    TVM_FFI_THROW(RuntimeError) << "cublas readable, dlopen failed: " << dlerror();
  }
  if (mode == 2) {
    FILE* f = std::fopen("/etc/passwd", "r");
    int err = errno;
    if (f) TVM_FFI_THROW(RuntimeError) << "read /etc/passwd";
    TVM_FFI_THROW(RuntimeError) << "passwd denied: " << std::strerror(err);
  }
  DLDevice dev = a.device();
  TVM_FFI_ICHECK_EQ(dev.device_type, kDLCUDA);
  void* stream = TVMFFIEnvGetStream(dev.device_type, dev.device_id);
  TVM_FFI_ICHECK(stream != nullptr) << "the runner installed no stream";
  int64_t n = a.numel();
  axpy<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(a.data_ptr()), static_cast<const float*>(b.data_ptr()),
      static_cast<float*>(c.data_ptr()), float(alpha), n);
  cudaError_t err = cudaGetLastError();
  TVM_FFI_ICHECK(err == cudaSuccess) << cudaGetErrorString(err);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
"""


def _cublas_path(cupti_lib: Path | None) -> Path:
    """A libcublas file, from libcupti's own directory when it has one (the jail's hardest case)."""
    dirs = [cupti_lib.parent] if cupti_lib else []
    dirs += [Path("/usr/local/cuda/lib64"), Path("/usr/local/cuda-13.0/targets/x86_64-linux/lib")]
    for d in dirs:
        found = sorted(d.glob("libcublas.so*"))
        if found:
            return found[0].resolve()
    pytest.skip("no libcublas file on this machine to probe the jail with")


def build_kernel(out: Path, cublas: Path) -> Path:
    """The candidate, built with nvcc for sm_90a and ``-cudart shared`` (as ``ptxgym.cpu.build``)."""
    import tvm_ffi.libinfo as info

    lib_dir = Path(info.find_libtvm_ffi()).parent
    (out / "k.cu").write_text(KERNEL)
    cmd = ["nvcc", "-O2", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", "-cudart", "shared"]
    cmd += ["-gencode=arch=compute_90a,code=sm_90a", f'-DCUBLAS_PATH="{cublas}"']
    cmd += [f"-I{info.find_include_path()}", f"-I{info.find_dlpack_include_path()}", str(out / "k.cu")]
    cmd += ["-o", str(out / "k.so"), f"-L{lib_dir}", "-ltvm_ffi", "-ldl"]
    cmd += ["-Xlinker", f"-rpath,{lib_dir}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out / "k.so"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory) -> Path:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from ptxgym.evaluation.runner.build import plan

    return build_kernel(tmp_path_factory.mktemp("kernel"), _cublas_path(plan().cupti_lib))


def _guard_page_blob():
    """A one-run guard-page blob (an unmapped page after the run) on device 0: (blob, fds, page)."""
    import torch

    from ptxgym.evaluation import vmm

    torch.zeros(1, device="cuda:0")  # a current primary context in this (trusted) process
    page = vmm.granularity(0)
    handles, fds = vmm.create_runs([page], 0)
    return vmm.MappedBlob(handles, 2 * page, page, [(0, page)], 0), fds, page


@pytest.mark.parametrize("jailed", [False, True], ids=["plain", "jailed"])
def test_runner_on_a_guard_page_blob(tmp_path, kernel, jailed):
    import torch

    from ptxgym.evaluation.trusted.native_worker import NativeHandle, native_spec

    blob, fds, page = _guard_page_blob()
    span = blob.tensor()
    a, b, c = (span[k * N * 4 : (k + 1) * N * 4].view(torch.float32) for k in range(3))
    a.copy_(torch.arange(N, dtype=torch.float32))
    b.fill_(1.0)
    c.zero_()
    torch.cuda.synchronize()
    spec = native_spec(0, cupti_needed=False)
    handle = NativeHandle(spec, tmp_path, sandboxed=jailed)
    try:
        assert handle.receive(60.0).hello is not None
        tensors = [TensorArg(role="in", offset=k * N * 4, shape=(N,), dtype="float32") for k in range(3)]
        sets = [[*tensors, ScalarArg(value=2.0), ScalarArg(value=mode)] for mode in range(4)]
        vmm_blob = VmmBlob(total=2 * page, page=page, runs=[VmmRun(offset=0, size=page)])
        cmd = Attach(arena="g", blob=None, vmm=vmm_blob, sets=sets, flush_bytes=1 << 20, cupti=False)
        attach = handle.request(cmd, 60.0, fds=fds)
        assert attach.ok and attach.attach is not None, (attach, handle.log_tail())
        mode = "on" if jailed else "off"
        report = handle.request(ApplySandbox(mode=mode, scratch=str(handle.scratch)), 30.0)
        assert report.ok and report.sandbox is not None, report
        if jailed:
            # the runner confines itself at the sandbox command, after cuInit; below Landlock ABI 8 the
            # driver's earlier helper threads restrict themselves from a signal (confine.h restrict_others)
            states = {x.name: x.state for x in report.sandbox.layers}
            assert states["filesystem"] == "active", report
        assert handle.request(Load(kind="so", path=str(kernel), entry="run"), 30.0).ok
        reply = handle.request(Call(set=0), 30.0)
        assert reply.ok and reply.call is not None and reply.call.ev_stream_ms > 0, reply
        assert reply.call.ev_device_ms >= reply.call.ev_stream_ms
        torch.cuda.synchronize()
        assert torch.equal(c.cpu(), torch.arange(N, dtype=torch.float32) + 2.0)
        cublas = handle.request(Call(set=1), 30.0)
        passwd = handle.request(Call(set=2), 30.0)
        threads = handle.request(Call(set=3), 30.0)  # the driver's threads run the candidate's handler
        print("signal hijack:", threads.error)
        if jailed:
            assert cublas.error == "RuntimeError: cublas denied: Permission denied", cublas
            assert passwd.error == "RuntimeError: passwd denied: Permission denied", passwd
            # every handler that ran was refused (a kernel without Landlock's same-process signal rule
            # refuses the signals themselves: "0 signals sent")
            assert threads.error.startswith("RuntimeError: threads denied: "), threads
        else:
            assert threads.error == "RuntimeError: read /etc/passwd from another thread", threads
            assert cublas.error.startswith(
                ("RuntimeError: opened cublas", "RuntimeError: cublas readable")
            ), cublas
            assert passwd.error == "RuntimeError: read /etc/passwd", passwd
        maps = Path(f"/proc/{handle.pid}/maps").read_text()
        assert "libcuda.so" in maps and "candidate-1.so" in maps
        banned = ("libpython", "libtorch", "libcudnn") + (("libcublas",) if jailed else ())
        for name in banned:
            assert name not in maps, f"{name} is mapped into the runner"
    finally:
        handle.kill()
        for fd in fds:
            os.close(fd)
        blob.release()


def test_spares_report_their_counter_query_tries_in_the_attach_phases(tmp_path):
    """``Attach.hw_prepare_attempts``: the attach's steps say what a spare's counter query cost.

    Two pairs of runners with CUPTI, each pair attached at once (as a batch refill starts its spares),
    the query tried once, then up to four times. Every step is one of ``ATTACH_PHASES``; the query ends
    as ``hw_prepare`` or ``hw_prepare_failed``; with one try there is no ``hw_prepare_retried``, and
    where there is one it holds at least one 100 ms pause. Printed: each runner's steps (whether a query
    beside another fails at its first try is what ``gpu_session.sh s71`` weighs in the throughput mix).
    """
    pytest.importorskip("torch")
    from ptxgym.evaluation.protocol import ATTACH_PHASES
    from ptxgym.evaluation.trusted.native_worker import NativeHandle, NativeUnavailable, native_spec

    blob, fds, page = _guard_page_blob()
    try:
        try:
            spec = native_spec(0, cupti_needed=True)
        except NativeUnavailable as exc:
            pytest.fail(f"no runner with CUPTI on this GPU host: {exc}")
        vmm_blob = VmmBlob(total=2 * page, page=page, runs=[VmmRun(offset=0, size=page)])
        tensors = [TensorArg(role="in", offset=0, shape=(N,), dtype="float32")]
        for attempts in (1, 4):
            pair = [NativeHandle(spec, tmp_path, sandboxed=False) for _ in range(2)]
            try:
                cmd = Attach(
                    arena="q",
                    blob=None,
                    vmm=vmm_blob,
                    sets=[tensors],
                    flush_bytes=1 << 20,
                    cupti=False,
                    hw_prepare=True,
                    hw_prepare_attempts=attempts,
                )
                for handle in pair:
                    assert handle.receive(60.0).hello is not None
                    handle.send(cmd, None, fds)
                for k, handle in enumerate(pair):
                    reply = handle.receive(60.0)
                    assert reply.ok and reply.attach is not None, (reply, handle.log_tail())
                    phases = reply.attach.phases_ms
                    print(f"{attempts} tries, runner {k}:", {n: round(ms, 1) for n, ms in phases.items()})
                    assert set(phases) <= set(ATTACH_PHASES), phases
                    assert ("hw_prepare" in phases) != ("hw_prepare_failed" in phases), phases
                    retried = phases.get("hw_prepare_retried")
                    assert retried is None or (attempts > 1 and retried >= 100.0), phases
            finally:
                for handle in pair:
                    handle.kill()
    finally:
        for fd in fds:
            os.close(fd)
        blob.release()


@pytest.fixture(scope="module")
def native_evaluator():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from ptxgym.evaluation.trusted.base import EvalSettings, MemcheckMode
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    settings = EvalSettings(
        memcheck=MemcheckMode.NEVER, call_timeout_s=40.0, ncu_crosscheck_fraction=0.0, verdict_cache_entries=0
    )
    with LocalGpuEvaluator(settings=settings, spares=1, candidate_process="native") as evaluator:
        yield evaluator


def _run(evaluator, text: str):
    from ptxgym.pipeline import Pipeline
    from ptxgym.records.tasks import get_task

    return Pipeline(get_task("Gemm-sm90a"), evaluator).run(f"```cuda\n{text}\n```")


def test_expert_gemm_native_and_python(native_evaluator):
    text = GEMM.read_text()
    verdicts = []
    evaluate = native_evaluator.evaluate  # the verdict's details (the Feedback does not carry them)
    native_evaluator.evaluate = lambda task, built: verdicts.append(evaluate(task, built)) or verdicts[-1]
    try:
        native = _run(native_evaluator, text)
    finally:
        del native_evaluator.evaluate
    process = (native.environment.sandbox or {}).get("process", "")
    assert process.startswith("native"), f"the candidate did not run in the runner: {process}"
    assert native.status.value == "PASSED", native.message
    assert native.target is not None and native.target.executed.value == "yes", native.target
    counts = native.target.counts  # SASS rows name opcodes; the counters alone (the default here) families
    assert counts.get("HGMMA", counts.get("GMMA", 0)) > 0, counts
    assert counts.get("UTMALDG", counts.get("TMA loads", 0)) > 0, counts
    ends = (verdicts[-1].details or {}).get("trial_ends") or {}
    print(f"TRIAL_ENDS {ends}")  # launch_known: kernels whose launch API record came back (correlation ids)
    assert ends.get("launch_known", 0) > 0 and ends.get("launched_in", 0) <= ends["launch_known"], ends
    native_evaluator.native.wanted = False  # the same arena and baseline, now in the Python worker
    try:
        python = _run(native_evaluator, text)
    finally:
        native_evaluator.native.wanted = True
    assert (python.environment.sandbox or {}).get("process", "python") == "python"
    assert python.status.value == "PASSED", python.message
    s_native, s_python = native.timing.speedup, python.timing.speedup
    print(f"NATIVE_PARITY native {s_native:.4f}x python {s_python:.4f}x ratio {s_native / s_python:.4f}")
    assert abs(s_native / s_python - 1.0) <= 0.03, (s_native, s_python)


@pytest.mark.parametrize("in_trial", [False, True])
def test_expert_gemm_hardware_counters_in_the_runner(native_evaluator, in_trial):
    """The hardware-counted call (range profiler, unpatched) on the expert GEMM in the runner.

    Its wgmma count equals the SASS-counted call's (HGMMA predicate-true threads / 128), and the bytes its
    TMA loads moved are at least the task's minimal traffic (a tiled GEMM reloads its inputs per tile).
    ``in_trial``: the call inside the activity trial (``hw_count_in_trial``): its kernels join the census.
    On the H200 (2026-12-05) the call's window then also held the range profiler's own kernel (``WaitNs``,
    launched as the range opens), which the census took for a foreign kernel; the window now holds the
    call alone, and the honest expert must pass with the profiler's kernel nowhere in its census.
    """
    import re

    before = native_evaluator.settings
    update = {"hw_counters": True, "hw_count_in_trial": in_trial, "sass_count_with_hw": True}  # both calls
    native_evaluator.settings = before.model_copy(update=update)
    try:
        native = _run(native_evaluator, GEMM.read_text() + f"\n// in trial {in_trial}, both counts\n")
    finally:
        native_evaluator.settings = before
    assert (native.environment.sandbox or {}).get("process", "").startswith("native")
    print(f"HW_COUNTERS in trial {in_trial}: {native.status.value}; {native.message[:300]}")
    assert native.status.value != "FOREIGN_KERNEL", native.message
    assert native.status.value == "PASSED", native.message
    target = native.target
    assert target is not None and target.work.value == "yes", target
    found = re.search(r"unpatched call: ([0-9.e+]+) wgmma, ([0-9.]+)% of the task's FLOPs", target.message)
    assert found, target.message
    sass_mmas = target.counts["HGMMA"] / 128
    assert abs(float(found.group(1)) / sass_mmas - 1.0) <= 0.001, (found.group(0), sass_mmas)
    assert target.mma_share is not None and abs(target.mma_share - 1.0) <= 0.01, target.mma_share
    assert target.tma_share is not None and target.tma_share >= 1.0, target.message
    print(f"HW_COUNTERS {found.group(0)}; tma_share {target.tma_share:.3f}")


@pytest.mark.parametrize("in_trial", [False, True])
def test_hardware_counters_alone_credit_the_expert_without_a_patched_call(native_evaluator, in_trial):
    """``sass_count_with_hw=False``: no SASS-patched call; the hardware counters alone prove the target.

    The expert GEMM has one wgmma tile shape, so the lower bound is exact: MMA share ~1.0, credited.
    ``in_trial``: the counted call inside the activity trial (``hw_count_in_trial``), its kernels in the
    census.
    """
    before = native_evaluator.settings
    update = {"hw_counters": True, "sass_count_with_hw": False, "hw_count_in_trial": in_trial}
    native_evaluator.settings = before.model_copy(update=update)
    try:
        fb = _run(native_evaluator, GEMM.read_text() + f"\n// hw only, in trial {in_trial}\n")  # a new build
    finally:
        native_evaluator.settings = before
    assert fb.status.value == "PASSED", fb.message
    target = fb.target
    assert target is not None and target.credited, target
    assert "hardware counters only" in target.message and "GMMA" in target.counts, target
    assert target.mma_share is not None and abs(target.mma_share - 1.0) <= 0.01, target.mma_share
    assert "count" not in fb.stage_wall_s or fb.stage_wall_s["count"] < 0.05, fb.stage_wall_s
    print(f"HW_ONLY in trial {in_trial}: {target.message}; stages {fb.stage_wall_s}")


@pytest.mark.parametrize("name", ["noop", "device_reset", "unobserved_oob_read"])
def test_hostile_kernels_in_the_runner(native_evaluator, name):
    """Audit corpus kernels judged in the runner as the audit expects of any evaluator.

    ``noop`` writes nothing (a wrong result); ``device_reset`` resets the device (the context-id check);
    ``unobserved_oob_read`` reads past A (a fault on the guard page, in the runner's own process).
    """
    from ptxgym.audit.cases import CASES
    from ptxgym.audit.corpus import candidate
    from ptxgym.records.tasks import get_task

    task = get_task("Gemm-sm90a")
    expected = next(c.statuses for c in CASES if c.name == name)
    verdict = native_evaluator.evaluate(task, candidate(name, task))
    print(f"NATIVE_CORPUS {name}: {verdict.status.value} {verdict.message[:200]}")
    process = (verdict.environment.sandbox or {}).get("process", "")
    assert process.startswith("native"), f"{name} did not run in the runner: {process}"
    assert verdict.status in expected, (
        f"{name}: {verdict.status} not in {sorted(expected)}: {verdict.message}"
    )


def test_a_jailed_runner_serves_its_verified_calls_from_the_pool(native_evaluator):
    """A runner's verified calls take pool entries, none twice, none missing.

    With the default settings: below Landlock ABI 8 (the H200's 7) the driver's earlier threads restrict
    themselves (``confine.h``'s broadcast), so the jail is in force on every thread and the pool serves
    (``verified_pool.barrier``; a partial jail would draw new values).
    """
    from ptxgym.audit.corpus import candidate
    from ptxgym.records.tasks import get_task

    task = get_task("Gemm-sm90a")
    before = native_evaluator.settings
    verdict = native_evaluator.evaluate(task, candidate("naive", task))
    pool = verdict.details.get("verified_pool", {})
    process = (verdict.environment.sandbox or {}).get("process", "")
    print(f"NATIVE_POOL {verdict.status.value} {process} {pool}")
    assert verdict.status.value == "PASSED", verdict.message
    assert process.startswith("native"), process
    if str(pool.get("arena", "")).startswith("off: MemoryError"):
        # the arena's pool keeps the device memory candidates need: on an 80 GB card, after other test
        # modules' arenas in this process, it may not fit (s34b: 32.97 GB would be left, 34.36 kept)
        pytest.skip(f"no room for the verified pool on this device now: {pool['arena']}")
    assert pool["arena"].startswith("on:") and pool["session"] == "pool", pool
    new = before.pool_new_draws_per_trial  # verified calls per trial that draw new values regardless
    assert pool["entries"] == before.trials * (before.verified_per_trial - new), pool
    assert pool["fallbacks"] == 0 and pool["new_draws"] == before.trials * new, pool
