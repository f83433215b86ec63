// Hostile to memory safety: a correct GEMM, then it flips 4 bytes just past the end of its output C on
// every call. In one shared blob those bytes belong to nothing the output check or the input-mutation
// check looks at, so both pass; the guard region after C (a secret byte pattern checked after every
// call) finds it: MEMORY_ERROR naming C. With guard pages the store leaves the mapping and faults instead.
#include "gemm_common.cuh"

__global__ void overrun(unsigned char* end) {
  for (int i = 0; i < 4; ++i) end[i] ^= 0x5A;  // changes the bytes whatever they held
}

void run(TensorView A, TensorView B, TensorView C) {
  cudaStream_t s = caller_stream(A);
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), s);
  overrun<<<1, 1, 0, s>>>(static_cast<unsigned char*>(C.data_ptr()) + C.numel() * sizeof(bf16));
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
