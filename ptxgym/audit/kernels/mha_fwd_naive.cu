// Honest, correct, slow attention forward for the MhaFwd task: O = softmax(Q K^T / sqrt(D)) V and the
// natural-log LSE. Four threads share one query row (32 of the 128 dims each, dot products reduced with
// warp shuffles) and run an online softmax over 32-key tiles staged in shared memory as fp32.
// Q, K, V, O: [B, H, S, 128] bf16; LSE: [B, H, S] fp32.
#include <cmath>

#include "gemm_common.cuh"

constexpr int kD = 128, kSplit = 4, kPart = kD / kSplit, kQueries = 32, kKeys = 32;
constexpr int kThreads = kQueries * kSplit;

__global__ void __launch_bounds__(kThreads) mha_fwd(const bf16* __restrict__ Q, const bf16* __restrict__ K,
                                                    const bf16* __restrict__ V, bf16* __restrict__ O,
                                                    float* __restrict__ LSE, int S, float scale) {
  __shared__ float sk[kKeys][kSplit][kPart + 1];
  __shared__ float sv[kKeys][kSplit][kPart + 1];
  const int H = gridDim.y, bh = blockIdx.z * H + blockIdx.y;
  const int part = threadIdx.x % kSplit, qi = blockIdx.x * kQueries + threadIdx.x / kSplit;
  const int64_t base = static_cast<int64_t>(bh) * S * kD;
  const bool live = qi < S;
  float q[kPart], o[kPart];
#pragma unroll
  for (int d = 0; d < kPart; ++d) {
    q[d] = live ? __bfloat162float(Q[base + static_cast<int64_t>(qi) * kD + part * kPart + d]) * scale : 0.f;
    o[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int k0 = 0; k0 < S; k0 += kKeys) {
    for (int i = threadIdx.x; i < kKeys * kD; i += kThreads) {
      const int j = i / kD, d = i % kD, kj = k0 + j;
      const int64_t at = base + static_cast<int64_t>(kj) * kD + d;
      sk[j][d / kPart][d % kPart] = kj < S ? __bfloat162float(K[at]) : 0.f;
      sv[j][d / kPart][d % kPart] = kj < S ? __bfloat162float(V[at]) : 0.f;
    }
    __syncthreads();
    const int keys = min(kKeys, S - k0);
    for (int j = 0; j < keys; ++j) {
      float s = 0.f;
#pragma unroll
      for (int d = 0; d < kPart; ++d) s += q[d] * sk[j][part][d];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      const float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
      l = l * corr + p;
#pragma unroll
      for (int d = 0; d < kPart; ++d) o[d] = o[d] * corr + p * sv[j][part][d];
      m = mn;
    }
    __syncthreads();
  }
  if (live) {
#pragma unroll
    for (int d = 0; d < kPart; ++d)
      O[base + static_cast<int64_t>(qi) * kD + part * kPart + d] = __float2bfloat16(o[d] / l);
    if (part == 0) LSE[static_cast<int64_t>(bh) * S + qi] = m + logf(l);
  }
}

void run(TensorView Q, TensorView K, TensorView V, TensorView O, TensorView LSE) {
  const int B = static_cast<int>(Q.size(0)), H = static_cast<int>(Q.size(1)), S = static_cast<int>(Q.size(2));
  TVM_FFI_ICHECK(Q.size(3) == kD) << "head dimension must be " << kD;
  dim3 grid((S + kQueries - 1) / kQueries, H, B);
  mha_fwd<<<grid, kThreads, 0, caller_stream(Q)>>>(
      static_cast<const bf16*>(Q.data_ptr()), static_cast<const bf16*>(K.data_ptr()),
      static_cast<const bf16*>(V.data_ptr()), static_cast<bf16*>(O.data_ptr()), static_cast<float*>(LSE.data_ptr()),
      S, 1.0f / sqrtf(static_cast<float>(kD)));
  cudaError_t err = cudaGetLastError();
  TVM_FFI_ICHECK(err == cudaSuccess) << cudaGetErrorString(err);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
