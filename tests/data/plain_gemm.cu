#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__global__ void gemm_naive(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                           int M, int N, int K) {
  int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= M || col >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += __bfloat162float(A[row * K + k]) * __bfloat162float(B[col * K + k]);
  C[row * N + col] = __float2bfloat16(acc);
}

void run(tvm::ffi::TensorView A, tvm::ffi::TensorView B, tvm::ffi::TensorView C) {
  int M = A.size(0), K = A.size(1), N = B.size(0);
  auto stream = (cudaStream_t)TVMFFIEnvGetStream(A.device().device_type, A.device().device_id);
  dim3 block(16, 16), grid((N + 15) / 16, (M + 15) / 16);
  gemm_naive<<<grid, block, 0, stream>>>((const __nv_bfloat16*)A.data_ptr(), (const __nv_bfloat16*)B.data_ptr(),
                                         (__nv_bfloat16*)C.data_ptr(), M, N, K);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
