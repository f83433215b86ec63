// Decoy: carries a wgmma (HGMMA in the SASS) in a kernel that is never launched; the real work is the
// plain tiled GEMM. Static check: yes. Executed check: must be no.
#include "gemm_common.cuh"

__global__ void __launch_bounds__(128) never_launched(uint64_t desc_a, uint64_t desc_b, float* out, int scale_d) {
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile(
      "{\n.reg .pred acc;\nsetp.ne.b32 acc, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, acc, 1, 1, 0, 0;\n}\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  out[threadIdx.x] = d0 + d1 + d2 + d3;
}

void run(TensorView A, TensorView B, TensorView C) {
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), caller_stream(A));
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
