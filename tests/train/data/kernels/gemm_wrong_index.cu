// Wrong on purpose (reads B as K x N): builds, but its results are incorrect. Fixit fixture.
// Test fixture of the SFT dataset builders and the learning test: it must build for sm_90a.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

__global__ void gemm_bt(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K) {
  const int i = blockIdx.y * 16 + threadIdx.y;  // row of C
  const int j = blockIdx.x * 16 + threadIdx.x;  // column of C
  if (i >= M || j >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += __bfloat162float(A[(size_t)i * K + k]) * __bfloat162float(B[(size_t)k * N + j]);
  C[(size_t)i * N + j] = __float2bfloat16(acc);
}

void run(tvm::ffi::TensorView A, tvm::ffi::TensorView B, tvm::ffi::TensorView C) {
  const int M = A.size(0), K = A.size(1), N = B.size(0);
  cudaStream_t stream = (cudaStream_t)TVMFFIEnvGetStream(A.device().device_type, A.device().device_id);
  dim3 block(16, 16), grid((N + 15) / 16, (M + 15) / 16);
  gemm_bt<<<grid, block, 0, stream>>>((const __nv_bfloat16*)A.data_ptr(), (const __nv_bfloat16*)B.data_ptr(),
                                      (__nv_bfloat16*)C.data_ptr(), M, N, K);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
