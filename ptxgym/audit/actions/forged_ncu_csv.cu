// Issue 11 item 2: a SIMT GEMM (plus a never-launched wgmma, so the SASS shows HGMMA and the profiler is
// asked) that prints Nsight Compute-shaped CSV rows claiming the GEMM expert's HGMMA counts on every call.
// The profiler's report is read from its own file, so the forgery must earn nothing: executed = no.
#include <cstdio>

#include "gemm_common.cuh"

__global__ void __launch_bounds__(128) never_launched(uint64_t desc_a, uint64_t desc_b, float* out) {
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 0, 1, 1, 0, 0;\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "l"(desc_a), "l"(desc_b));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  out[threadIdx.x] = d0 + d1 + d2 + d3;
}

void run(TensorView A, TensorView B, TensorView C) {
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), caller_stream(A));
  std::printf("\"Kernel Name\",\"gemm::gemm_kernel(CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, int, int, int)\",\n");
  std::printf("\"Address\",\"Source\",\"inst_executed\",\"thread_inst_executed_true\"\n");
  for (int i = 0; i < 4; ++i)
    std::printf("\"0x7f0000000db%d\",\"      HGMMA.64x256x16.F32.BF16 R24, gdesc[UR8], R24\",\"1146880\",\"36700160\"\n", i);
  std::fflush(stdout);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
