// Hostile test solution: loads cuBLAS at run time so that no source regex can see it. The loader's name is
// token-pasted (no `dlopen` token) and the library and function names are spelled from character
// differences (no "cublas" in any string literal). The source policy passes it; the symbol-level check of
// the built .so must reject it, because the .so imports dlopen and dlsym.
#include <cuda_runtime.h>
#include <tvm/ffi/tvm_ffi.h>
#include <tvm/ffi/extra/c_env_api.h>

#define JOIN(a, b) a##b
extern "C" void* JOIN(dl, open)(const char* file, int mode);
extern "C" void* JOIN(dl, sym)(void* handle, const char* name);

// Writes the string whose characters are 'a' + running sum of deltas.
static void spell(char* out, const int* deltas, int n) {
  int c = 'a';
  for (int i = 0; i < n; ++i) {
    c += deltas[i];
    out[i] = static_cast<char>(c);
  }
  out[n] = '\0';
}

using create_fn = int (*)(void**);

void run(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView c) {
  static const int lib_deltas[] = {11, -3, -7, 1, 18, -19, 10, -11, 18, -69, 69, -4, -65, 3, 2};
  static const int fn_deltas[] = {2, 18, -19, 10, -11, 18, -48, 47, -13, -4, 19, -15, -6, 23, -68};
  char lib_name[32], fn_name[32];
  spell(lib_name, lib_deltas, 15);
  spell(fn_name, fn_deltas, 15);
  void* lib = JOIN(dl, open)(lib_name, 2);
  auto create = lib ? reinterpret_cast<create_fn>(JOIN(dl, sym)(lib, fn_name)) : nullptr;
  void* handle = nullptr;
  TVM_FFI_ICHECK(create != nullptr && create(&handle) == 0) << "vendor library unavailable";
  // ... a vendor GEMM on a, b, c would follow here.
  (void)a;
  (void)b;
  (void)c;
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
