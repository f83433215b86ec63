"""The native runner's GPU path (NEVER RUN YET: written on a CPU host for the next GPU session).

The trusted side (this test process) builds a guard-page blob with ``evaluation/vmm.py`` (one run, an
unmapped page after it), fills it through torch, and sends the run's fd with the attach; the runner
imports and maps it, installs its stream in TVM-FFI and times the call with CUDA events. The candidate
is a real nvcc-built TVM-FFI kernel that launches on the stream TVM-FFI hands it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ptxgym.evaluation.runner import wire
from ptxgym.evaluation.runner.build import build_runner
from ptxgym.evaluation.runner.client import RunnerClient
from ptxgym.evaluation.runner.jail import runner_jail

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

N = 4096

KERNEL = r"""
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

using tvm::ffi::TensorView;

__global__ void axpy(const float* x, const float* y, float* z, float alpha, int64_t n) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) z[i] = x[i] + alpha * y[i];
}

void run(TensorView a, TensorView b, TensorView c, double alpha) {
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


def build_kernel(out: Path) -> Path:
    """The candidate, built with nvcc for sm_90a (what the H200 runs)."""
    import tvm_ffi.libinfo as info

    lib_dir = Path(info.find_libtvm_ffi()).parent
    (out / "k.cu").write_text(KERNEL)
    cmd = [
        "nvcc",
        "-O2",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-std=c++17",
        "-gencode=arch=compute_90a,code=sm_90a",
    ]
    cmd += [f"-I{info.find_include_path()}", f"-I{info.find_dlpack_include_path()}", str(out / "k.cu")]
    cmd += ["-o", str(out / "k.so"), f"-L{lib_dir}", "-ltvm_ffi", "-Xlinker", f"-rpath,{lib_dir}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out / "k.so"


@pytest.mark.parametrize("jailed", [False, True], ids=["plain", "jailed"])
def test_gpu_call_on_a_guard_page_blob(tmp_path, jailed):
    """``jailed``: through ``runner_jail(gpu=True)``, whose GPU read rules are a guess to check here."""
    torch = pytest.importorskip("torch")
    from ptxgym.evaluation import vmm

    torch.zeros(1, device="cuda:0")  # a current primary context in this (trusted) process
    page = vmm.granularity(0)
    handles, fds = vmm.create_runs([page], 0)
    blob = vmm.MappedBlob(handles, 2 * page, page, [(0, page)], 0)  # an unmapped page after the run
    span = blob.tensor()
    a, b, c = (span[k * N * 4 : (k + 1) * N * 4].view(torch.float32) for k in range(3))
    a.copy_(torch.arange(N, dtype=torch.float32))
    b.fill_(1.0)
    c.zero_()
    torch.cuda.synchronize()
    binary = build_runner(tmp_path / "cache")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    kernel = build_kernel(scratch)
    jail = runner_jail(binary, scratch, gpu=True) if jailed else None
    client = RunnerClient(binary, tmp_path, jail=jail)
    try:
        spec = wire.GpuBlob(device=0, total=2 * page, page=page, runs=[wire.Run(offset=0, size=page)])
        attach = client.request(wire.Attach(blob=spec), fds=fds)
        assert attach.ok and attach.attach and attach.attach.device == "cuda", attach
        assert client.request(wire.Load(path=str(kernel), entry="run")).ok

        def t(off: int) -> wire.TensorArg:
            return wire.TensorArg(role="in", offset=off, shape=(N,), dtype="float32", device="cuda")

        reply = client.request(wire.Call(args=[t(0), t(N * 4), t(2 * N * 4), wire.ScalarArg(value=2.0)]))
        assert reply.ok and reply.call and reply.call.ev_ms is not None and reply.call.ev_ms > 0, reply
        torch.cuda.synchronize()
        assert torch.equal(c.cpu(), torch.arange(N, dtype=torch.float32) + 2.0)
        past = client.request(wire.Call(args=[t(0), t(N * 4), t(page - 4), wire.ScalarArg(value=2.0)]))
        assert not past.ok and past.error and "not inside a mapped run" in past.error
        maps = Path(f"/proc/{client.pid}/maps").read_text()
        assert "libcuda.so" in maps
        for banned in ("libpython", "libtorch", "libcublas", "libcudnn"):
            assert banned not in maps, f"{banned} is mapped into the runner"
    finally:
        client.kill()
        for fd in fds:
            os.close(fd)
        blob.release()
