// Shared by the GEMM test candidates (C[M,N] = A[M,K] * B[N,K]^T, bf16 in and out, fp32 accumulation):
// a plain register-tiled kernel (64x64 block tile, 16-deep k slices staged in shared memory as fp32,
// 4x4 outputs per thread) and the caller-stream lookup of the TVM-FFI solution ABI.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/tvm_ffi.h>
#include <tvm/ffi/extra/c_env_api.h>

using bf16 = __nv_bfloat16;
using tvm::ffi::TensorView;

constexpr int kBM = 64, kBN = 64, kBK = 16;

__global__ void __launch_bounds__(256) gemm_tiled(const bf16* __restrict__ A, const bf16* __restrict__ B,
                                                  bf16* __restrict__ C, int M, int N, int K) {
  __shared__ float As[kBK][kBM + 4];
  __shared__ float Bs[kBK][kBN + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kBK) {
    for (int i = 0; i < 4; ++i) {
      const int idx = tid + i * 256, r = idx / kBK, c = idx % kBK, gk = k0 + c;
      const int ga = row0 + r, gb = col0 + r;
      As[c][r] = (ga < M && gk < K) ? __bfloat162float(A[static_cast<int64_t>(ga) * K + gk]) : 0.f;
      Bs[c][r] = (gb < N && gk < K) ? __bfloat162float(B[static_cast<int64_t>(gb) * K + gk]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
      if (r < M && c < N) C[static_cast<int64_t>(r) * N + c] = __float2bfloat16(acc[i][j]);
    }
}

inline cudaStream_t caller_stream(const TensorView& t) {
  auto dev = t.device();
  return static_cast<cudaStream_t>(TVMFFIEnvGetStream(dev.device_type, dev.device_id));
}

inline void launch_gemm(const TensorView& A, const TensorView& B, const TensorView& C, int rows,
                        cudaStream_t stream) {
  const int K = static_cast<int>(A.size(1)), N = static_cast<int>(B.size(0));
  dim3 grid((N + kBN - 1) / kBN, (rows + kBM - 1) / kBM);
  gemm_tiled<<<grid, 256, 0, stream>>>(static_cast<const bf16*>(A.data_ptr()),
                                       static_cast<const bf16*>(B.data_ptr()), static_cast<bf16*>(C.data_ptr()),
                                       rows, N, K);
  cudaError_t err = cudaGetLastError();
  TVM_FFI_ICHECK(err == cudaSuccess) << cudaGetErrorString(err);
}
