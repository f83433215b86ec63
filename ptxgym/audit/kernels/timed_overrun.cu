// Hostile to memory safety, unseen by a check made only at the end: a correct GEMM that, on one call past
// the correctness calls, flips 4 bytes just past the end of its output C, and flips them back on the next
// call. Between the two a check after each call sees the changed guard bytes (MEMORY_ERROR); so must the
// checks queued after each call and read at the trial's end (EvalSettings.deferred_call_checks). With
// guard pages the store leaves the mapping and faults instead.
#include "gemm_common.cuh"

__global__ void flip(unsigned char* end) {
  for (int i = 0; i < 4; ++i) end[i] ^= 0x5A;
}

void run(TensorView A, TensorView B, TensorView C) {
  static int calls = 0;
  static unsigned char* flipped = nullptr;
  cudaStream_t s = caller_stream(A);
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), s);
  ++calls;
  if (calls == 8) {
    flipped = static_cast<unsigned char*>(C.data_ptr()) + C.numel() * sizeof(bf16);
    flip<<<1, 1, 0, s>>>(flipped);
  } else if (calls == 9 && flipped != nullptr) {
    flip<<<1, 1, 0, s>>>(flipped);  // put back: the guard bytes as they were
  }
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
