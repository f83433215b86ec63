// Honest GEMM whose operand tiles arrive by TMA (cp.async.bulk.tensor, UTMALDG in SASS), math in plain
// fp32 FMAs: correct, slow, and the target family (TMA) really executes.
//
// Per block: a 64x64 tile of C, 256 threads. Each 64-deep k step, thread 0 arms an mbarrier with the
// byte count and issues two 2-D TMA loads (A rows x 64 k, B rows x 64 k, bf16, no swizzle); everyone
// waits on the barrier phase, converts the tiles to padded fp32 shared arrays, and accumulates 4x4
// outputs per thread.
#include <cuda.h>

#include "gemm_common.cuh"

constexpr int kT = 64;                                          // tile rows and tile depth
constexpr uint32_t kTileBytes = kT * kT * sizeof(bf16);

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void wait_phase(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

__global__ void __launch_bounds__(256) gemm_tma(const __grid_constant__ CUtensorMap mapA,
                                                const __grid_constant__ CUtensorMap mapB, bf16* __restrict__ C,
                                                int M, int N, int K) {
  __shared__ alignas(128) bf16 sA[kT * kT];
  __shared__ alignas(128) bf16 sB[kT * kT];
  __shared__ float fA[16][kT + 4];
  __shared__ float fB[16][kT + 4];
  __shared__ alignas(8) uint64_t full;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int row0 = blockIdx.y * kT, col0 = blockIdx.x * kT;
  const uint32_t bar = smem_addr(&full);
  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  float acc[4][4] = {};
  uint32_t parity = 0;
  for (int k0 = 0; k0 < K; k0 += kT) {
    if (tid == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(2 * kTileBytes)
                   : "memory");
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
          ::"r"(smem_addr(sA)), "l"(&mapA), "r"(k0), "r"(row0), "r"(bar)
          : "memory");
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
          ::"r"(smem_addr(sB)), "l"(&mapB), "r"(k0), "r"(col0), "r"(bar)
          : "memory");
    }
    wait_phase(bar, parity);
    parity ^= 1;
    for (int ks = 0; ks < kT; ks += 16) {
      for (int i = 0; i < 4; ++i) {
        const int idx = tid + i * 256, r = idx / 16, c = idx % 16;
        fA[c][r] = __bfloat162float(sA[r * kT + ks + c]);
        fB[c][r] = __bfloat162float(sB[r * kT + ks + c]);
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += fA[kk][ty * 4 + i] * fB[kk][tx * 4 + j];
      __syncthreads();
    }
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
      if (r < M && c < N) C[static_cast<int64_t>(r) * N + c] = __float2bfloat16(acc[i][j]);
    }
}

static CUtensorMap tile_map(const TensorView& t) {
  CUtensorMap map;
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(t.size(1)), static_cast<cuuint64_t>(t.size(0))};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(t.size(1)) * sizeof(bf16)};
  cuuint32_t box[2] = {kT, kT};
  cuuint32_t element_strides[2] = {1, 1};
  CUresult res = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, t.data_ptr(), dims, strides, box,
                                        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TVM_FFI_ICHECK(res == CUDA_SUCCESS) << "cuTensorMapEncodeTiled failed with " << static_cast<int>(res);
  return map;
}

void run(TensorView A, TensorView B, TensorView C) {
  const int M = static_cast<int>(A.size(0)), K = static_cast<int>(A.size(1)), N = static_cast<int>(B.size(0));
  TVM_FFI_ICHECK(K % kT == 0) << "K must be a multiple of " << kT;
  CUtensorMap mapA = tile_map(A), mapB = tile_map(B);
  dim3 grid((N + kT - 1) / kT, (M + kT - 1) / kT);
  gemm_tma<<<grid, 256, 0, caller_stream(A)>>>(mapA, mapB, static_cast<bf16*>(C.data_ptr()), M, N, K);
  cudaError_t err = cudaGetLastError();
  TVM_FFI_ICHECK(err == cudaSuccess) << cudaGetErrorString(err);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
