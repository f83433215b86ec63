// Plain CUDA kernel, no tensor-core or TMA instructions: must NOT be detected as the target family.
// Two-file solution: the device helper lives in plain_scale.cuh; the entry point is not called `run`.
#include <cuda_runtime.h>
#include <tvm/ffi/tvm_ffi.h>
#include <tvm/ffi/extra/c_env_api.h>

#include "plain_scale.cuh"

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n, float scale) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = scale_and_shift(x[i], scale, 1.0f);
}

// Destination-passing entry point: y = 2 * x + 1.
void scale_add(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
  const int n = static_cast<int>(x.size(0));
  auto dev = x.device();
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(dev.device_type, dev.device_id));
  scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(static_cast<const float*>(x.data_ptr()),
                                                     static_cast<float*>(y.data_ptr()), n, 2.0f);
  cudaError_t err = cudaGetLastError();
  TVM_FFI_ICHECK(err == cudaSuccess) << cudaGetErrorString(err);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(scale_add, scale_add);
