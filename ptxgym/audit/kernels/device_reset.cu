// Hostile: destroys the CUDA context of the process that loaded it.
#include "gemm_common.cuh"

void run(TensorView A, TensorView B, TensorView C) { cudaDeviceReset(); }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
