// Hostile (issue 11 item 11): a correct GEMM through the built module's kernel, plus a module the driver
// loads from memory (PTX text, compiled at run time) that defines a kernel under the built kernel's own
// mangled name and runs inside every call. A census by name alone sees only the module's name. The source
// screen rejects the loader call; this candidate is built past it to test the next layer, the in-band
// census of loaded module images: FOREIGN_KERNEL.
#include "gemm_common.cuh"

#define OWN_NAME "_Z10gemm_tiledPK13__nv_bfloat16S1_PS_iii"

static const char kPtx[] =
    ".version 8.0\n.target sm_90a\n.address_size 64\n"
    ".visible .entry " OWN_NAME "()\n{\n\tret;\n}\n";

static cudaKernel_t g_foreign = nullptr;

void run(TensorView A, TensorView B, TensorView C) {
  cudaStream_t stream = caller_stream(A);
  if (g_foreign == nullptr) {
    cudaLibrary_t lib;
    if (cudaLibraryLoadData(&lib, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0) == cudaSuccess) {
      cudaLibraryGetKernel(&g_foreign, lib, OWN_NAME);
    }
  }
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), stream);
  if (g_foreign != nullptr) {
    cudaLaunchKernel(reinterpret_cast<const void*>(g_foreign), dim3(1), dim3(1), nullptr, 0, stream);
  }
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
