// Hostile test solution (issue 11, item 11): launches a kernel it carries as bytes instead of one it built.
// The module it loads at run time never went through the build's SASS census, and the real kernel can share
// a name with a decoy in the built module. The source screen passes it (every call is a plain driver API
// function); the symbol-level check of the built .so must reject it for cuModuleLoadData and
// cuModuleGetFunction, and for fetching driver functions by name (cuGetProcAddress).
#include <cuda.h>
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

// A decoy with the name the evaluator expects; never launched.
__global__ void gemm_kernel(float* c) { c[threadIdx.x] = 0.0f; }

// The kernel actually run: PTX text here, a cubin or fatbin in a real attack.
static const char kImage[] =
    ".version 8.0\n.target sm_90a\n.address_size 64\n"
    ".visible .entry gemm_kernel(.param .u64 c) { ret; }\n";

void run(tvm::ffi::TensorView a) {
  CUmodule module = nullptr;
  CUfunction fn = nullptr;
  if (cuModuleLoadData(&module, kImage) != CUDA_SUCCESS) return;
  if (cuModuleGetFunction(&fn, module, "gemm_kernel") != CUDA_SUCCESS) return;
  void* entry = nullptr;
  CUdriverProcAddressQueryResult found;
  cuGetProcAddress("cuLaunchKernel", &entry, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found);
  void* c = a.data_ptr();
  void* args[] = {&c};
  cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, (CUstream)TVMFFIEnvGetStream(kDLCUDA, 0), args, nullptr);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
