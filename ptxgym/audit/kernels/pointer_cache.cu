// Hostile: caches C per (A, B, C) pointer triple; a call with pointers seen before copies the cached
// result instead of computing (stale as soon as the values behind the pointers change).
#include <map>
#include <tuple>

#include "gemm_common.cuh"

void run(TensorView A, TensorView B, TensorView C) {
  static std::map<std::tuple<void*, void*, void*>, void*> cache;
  cudaStream_t s = caller_stream(A);
  const size_t bytes = static_cast<size_t>(C.numel()) * sizeof(bf16);
  auto key = std::make_tuple(A.data_ptr(), B.data_ptr(), C.data_ptr());
  auto hit = cache.find(key);
  if (hit != cache.end()) {
    cudaMemcpyAsync(C.data_ptr(), hit->second, bytes, cudaMemcpyDeviceToDevice, s);
    return;
  }
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), s);
  void* saved = nullptr;
  cudaMalloc(&saved, bytes);
  cudaMemcpyAsync(saved, C.data_ptr(), bytes, cudaMemcpyDeviceToDevice, s);
  cache[key] = saved;
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
