// Issue 11 item 13: a SIMT GEMM that also issues exactly one real wgmma per call (one warpgroup, one
// m64n8k16 MMA on zeroed shared memory, result discarded). The target executes, but does 16,384 of the
// task's 6e11 FLOPs: no target credit.
#include "gemm_common.cuh"

__device__ float g_sink[128];

__device__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {  // no swizzle, K-major
  return static_cast<uint64_t>((addr >> 4) & 0x3FFF) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32);
}

__global__ void __launch_bounds__(128) one_wgmma() {
  __shared__ __align__(128) bf16 tile[64 * 16 + 8 * 16];  // A 64x16 then B 8x16, all zero
  for (int i = threadIdx.x; i < 64 * 16 + 8 * 16; i += 128) tile[i] = __float2bfloat16(0.f);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  const uint64_t desc_a = smem_desc(base, 128, 256), desc_b = smem_desc(base + 64 * 16 * 2, 128, 256);
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 0, 1, 1, 0, 0;\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "l"(desc_a), "l"(desc_b));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  g_sink[threadIdx.x] = d0 + d1 + d2 + d3;
}

void run(TensorView A, TensorView B, TensorView C) {
  cudaStream_t stream = caller_stream(A);
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), stream);
  one_wgmma<<<1, 128, 0, stream>>>();
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
