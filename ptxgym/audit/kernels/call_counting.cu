// Hostile: honest for the first few calls (enough to pass a one-shot correctness check), then it skips
// the work entirely.
#include "gemm_common.cuh"

void run(TensorView A, TensorView B, TensorView C) {
  static int calls = 0;
  if (++calls > 4) return;
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), caller_stream(A));
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
