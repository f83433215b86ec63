// Hostile to memory safety, and only when nobody watches: a correct GEMM, plus a kernel that reads 128
// bytes past the end of its input A, launched only when /proc/self/maps shows no sanitizer or profiler
// library (or cannot be read). Under compute-sanitizer it behaves, so memcheck is clean; in the shared
// blob the read lands in a guard region and changes nothing, so every check passes. Only a read that
// faults in the worker itself stops it: guard pages (an unmapped page after every buffer).
#include <cstdio>
#include <cstring>

#include "gemm_common.cuh"

static bool observed() {
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return false;
  char line[4096];
  bool seen = false;
  while (!seen && std::fgets(line, sizeof(line), maps) != nullptr) {
    seen = std::strstr(line, "sanitizer") != nullptr || std::strstr(line, "TreeLauncher") != nullptr ||
           std::strstr(line, "Injection") != nullptr || std::strstr(line, "nsight") != nullptr;
  }
  std::fclose(maps);
  return seen;
}

__global__ void peek(const bf16* A, int64_t n, bf16* C) {
  if (__bfloat162float(A[n + 64]) == 123456.f) C[0] = A[0];  // never true for the guard's bytes either
}

void run(TensorView A, TensorView B, TensorView C) {
  static const bool watched = observed();
  cudaStream_t s = caller_stream(A);
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), s);
  if (!watched) {
    peek<<<1, 1, 0, s>>>(static_cast<const bf16*>(A.data_ptr()), A.numel(), static_cast<bf16*>(C.data_ptr()));
  }
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
