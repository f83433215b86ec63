// ptxas-report test solution: __launch_bounds__(1024, 2) caps `heavy` at 32 registers, so its 64 live
// accumulators spill; `helper` is a non-inlined device function (properties reported, not a kernel);
// `staged` uses static shared memory and a barrier.
#include <cuda_runtime.h>
#include <tvm/ffi/tvm_ffi.h>

__device__ __noinline__ float helper(const float* p, int n) {
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += p[i] * p[(i * 7) % n];
  return s;
}

__global__ void __launch_bounds__(1024, 2) heavy(float* x, int n) {
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = x[i * n + threadIdx.x];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = acc[i] * acc[(i + r) % 64] + 1.0f;
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) s += acc[i];
  x[threadIdx.x] = s + helper(x, n);
}

__global__ void staged(float* x) {
  __shared__ float buf[1024];
  buf[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  x[threadIdx.x] = buf[1023 - threadIdx.x];
}

void run(tvm::ffi::TensorView x) {
  const int n = static_cast<int>(x.size(0)) / 64;
  heavy<<<1, 1024>>>(static_cast<float*>(x.data_ptr()), n);
  staged<<<1, 1024>>>(static_cast<float*>(x.data_ptr()));
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
