// Hostile: a correct GEMM that first grabs (and keeps) 40 GiB of GPU memory.
#include "gemm_common.cuh"

void run(TensorView A, TensorView B, TensorView C) {
  static void* hoard = nullptr;
  if (hoard == nullptr) cudaMalloc(&hoard, size_t(40) << 30);
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), caller_stream(A));
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
