// Issue 11, the in-band proof hole: the call counted per SASS instruction used to be one more call after
// the timed ones, always the step's last (the 184th at the default settings: 3 correctness calls + 3 trials
// x (10 warm-up + 50 timed) + 1). This candidate counts its calls on the host: every call runs the SIMT
// GEMM (so every output is right), and the call it takes for the counted one also runs a wgmma loop
// executing more MMA FLOPs than the task's 2 x 8192 x 7168 x 5120, on zeroed shared memory, result
// discarded. Counted there, it would earn the target credit while every timed call is SIMT. The counted call
// now sits at a secret slot among the timed calls: the guess is right once in trials x (iterations + 1).
// LAST_CALL 0: the wgmma loop on every call (the control that shows the loop alone earns the credit).
#include "gemm_common.cuh"

#ifndef LAST_CALL
#define LAST_CALL 184
#endif

constexpr int kBurnBlocks = 1792, kBurnIters = 2600;  // 1792 x 2600 m64n64k16 MMAs = 1.013 x the task

__device__ float g_burn_sink[kBurnBlocks];

__device__ uint64_t burn_desc(uint32_t addr) {  // no swizzle, K-major: LBO 128 B, SBO 256 B
  return static_cast<uint64_t>((addr >> 4) & 0x3FFF) | (static_cast<uint64_t>(128 >> 4) << 16) |
         (static_cast<uint64_t>(256 >> 4) << 32);
}

__global__ void __launch_bounds__(128) wgmma_burn() {
  __shared__ __align__(128) bf16 tile[2 * 64 * 16];  // A 64x16 then B 64x16, all zero
  for (int i = threadIdx.x; i < 2 * 64 * 16; i += 128) tile[i] = __float2bfloat16(0.f);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  const uint64_t da = burn_desc(base), db = burn_desc(base + 64 * 16 * 2);
  float d[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  for (int it = 0; it < kBurnIters; ++it) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, 1, 1, 1, 0, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
          "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
          "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
          "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) sum += d[i];
  if (threadIdx.x == 0) g_burn_sink[blockIdx.x] = sum;
}

void run(TensorView A, TensorView B, TensorView C) {
  static long calls = 0;
  ++calls;
  cudaStream_t stream = caller_stream(A);
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), stream);
  if (LAST_CALL == 0 || calls == LAST_CALL) wgmma_burn<<<kBurnBlocks, 128, 0, stream>>>();
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
