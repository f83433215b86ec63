// Hostile: computes only the first half of the rows of C.
#include "gemm_common.cuh"

void run(TensorView A, TensorView B, TensorView C) {
  launch_gemm(A, B, C, static_cast<int>(A.size(0)) / 2, caller_stream(A));
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
