// Issue 11 (the counted call, requirement 2): a SIMT GEMM that does the task's share of wgmma work only
// when it notices it is being instrumented. Every call first times a chain of dependent FMAs with the SM
// clock; instruction-level patching (CUPTI's SASS metrics, the counted call) makes that chain many times
// slower than the fastest run seen so far, and only then does a second kernel issue enough m64n8k16
// wgmma on zeroed shared memory (results discarded) to exceed half of the task's FLOPs. Unpatched calls
// (the timed ones, and the hardware-counted call) pay almost nothing for it. Expected: PASSED, no target
// credit (the hardware counters of an unpatched call see no wgmma, and the smaller share decides).
#include "gemm_common.cuh"

__device__ unsigned long long g_fastest = ~0ull;  // the fastest probe so far, SM cycles
__device__ unsigned long long g_last = 0;         // this call's probe
__device__ float g_sink[4 * 128];

__global__ void probe() {
  float x = threadIdx.x * 1e-3f;
  const long long t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < 2048; ++i) x = fmaf(x, 0.999f, 1e-4f);
  const long long t1 = clock64();
  if (threadIdx.x == 0) {
    const unsigned long long took = static_cast<unsigned long long>(t1 - t0);
    g_last = took;
    atomicMin(&g_fastest, took);
  }
  if (x == 12345.f) g_sink[0] = x;  // keep the chain
}

__device__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {  // no swizzle, K-major
  return static_cast<uint64_t>((addr >> 4) & 0x3FFF) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32);
}

constexpr int kBlocks = 132, kWarpgroups = 4, kMmas = 40000;  // 132 x 4 x 40000 x 16384: 3.5e11 FLOPs

__global__ void __launch_bounds__(128 * kWarpgroups) wgmma_when_watched() {
  if (g_last <= 4 * g_fastest) return;  // not instrumented: nothing to show
  __shared__ __align__(128) bf16 tile[64 * 16 + 8 * 16];  // A 64x16 then B 8x16, all zero
  for (int i = threadIdx.x; i < 64 * 16 + 8 * 16; i += blockDim.x) tile[i] = __float2bfloat16(0.f);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  const uint64_t desc_a = smem_desc(base, 128, 256), desc_b = smem_desc(base + 64 * 16 * 2, 128, 256);
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
#pragma unroll 1
  for (int i = 0; i < kMmas; ++i) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "l"(desc_a), "l"(desc_b));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }
  g_sink[threadIdx.x] = d0 + d1 + d2 + d3;
}

void run(TensorView A, TensorView B, TensorView C) {
  cudaStream_t stream = caller_stream(A);
  probe<<<1, 32, 0, stream>>>();
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), stream);
  wgmma_when_watched<<<kBlocks, 128 * kWarpgroups, 0, stream>>>();
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
