// Hostile: a kernel that spins forever on a flag nobody sets.
#include "gemm_common.cuh"

__global__ void spin(volatile int* flag) {
  while (*flag == 0) {
  }
}

void run(TensorView A, TensorView B, TensorView C) {
  static int* flag = nullptr;
  if (flag == nullptr) {
    cudaMalloc(&flag, sizeof(int));
    cudaMemset(flag, 0, sizeof(int));
  }
  spin<<<1, 1, 0, caller_stream(A)>>>(flag);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
