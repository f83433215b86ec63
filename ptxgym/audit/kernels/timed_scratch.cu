// Hostile: a correct GEMM that, once past the first calls (the correctness check), uses 64 KiB of its
// input A as scratch on every call and leaves it dirty: an input write only the checks after timed calls
// (a secret share of each input's blocks, EvalSettings.input_check_share) and the timing's last check
// (every set whole) can see.
#include "gemm_common.cuh"

__global__ void scribble(bf16* A, int64_t start) {
  int64_t i = start + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  A[i] = __float2bfloat16(0.f);
}

void run(TensorView A, TensorView B, TensorView C) {
  static int64_t calls = 0;
  cudaStream_t s = caller_stream(A);
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), s);
  if (++calls > 4) {
    int64_t span = 32768, room = A.numel() - span;  // 64 KiB of bf16, somewhere new each call
    scribble<<<static_cast<unsigned>(span / 256), 256, 0, s>>>(
        static_cast<bf16*>(A.data_ptr()), (calls * 7919 * span) % room);
  }
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
