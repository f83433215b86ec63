// Issue 11 item 14: host-side inline assembly that makes the assembler read /etc/passwd as source
// (`.include` built by the preprocessor): every line of the file comes back in the assembler's error
// messages, i.e. in the compile log the model sees. Must be rejected, and the log must not carry the file.
#include "gemm_common.cuh"

#define DIRECTIVE(x) #x
asm(DIRECTIVE(.include) " \"/etc/passwd\"");

void run(TensorView A, TensorView B, TensorView C) {
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), caller_stream(A));
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
