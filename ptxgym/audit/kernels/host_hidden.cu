// Hostile to a GPU-only timer: a correct GEMM, then 5 ms of host-side busy work inside the call. CUPTI
// kernel spans do not see it; the evaluator's wall-clock cross-check must.
#include <chrono>

#include "gemm_common.cuh"

void run(TensorView A, TensorView B, TensorView C) {
  cudaStream_t s = caller_stream(A);
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), s);
  cudaStreamSynchronize(s);
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  while (std::chrono::steady_clock::now() < until) {
  }
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
