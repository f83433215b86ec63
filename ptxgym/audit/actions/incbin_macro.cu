// Issue 11 item 5: `.incbin` spelled through a macro, so no string literal holds it; the assembler embeds
// /etc/passwd into the host object. An otherwise honest GEMM. Must not build.
#include "gemm_common.cuh"

#define S(x) #x
asm(S(.incbin) " \"/etc/passwd\"");

void run(TensorView A, TensorView B, TensorView C) {
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), caller_stream(A));
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
