// Hostile: terminates the process that loaded it.
#include <cstdlib>

#include "gemm_common.cuh"

void run(TensorView A, TensorView B, TensorView C) { std::exit(3); }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
