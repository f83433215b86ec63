// Hostile: a kernel that stores through a wild pointer (a sticky "illegal memory access" error).
#include "gemm_common.cuh"

__global__ void wild_store(float* p) { p[threadIdx.x] = 1.f; }

void run(TensorView A, TensorView B, TensorView C) {
  wild_store<<<1, 32, 0, caller_stream(A)>>>(reinterpret_cast<float*>(0x10));
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
