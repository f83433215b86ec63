// Honest, correct, slow GEMM on the caller stream: PASSED, target executed = no (no wgmma/TMA).
#include "gemm_common.cuh"

void run(TensorView A, TensorView B, TensorView C) {
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), caller_stream(A));
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
