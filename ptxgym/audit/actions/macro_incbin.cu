// Issue 11 item 14: an assembler `.macro` takes the directive's name as an argument and expands to
// `.incbin "/etc/passwd"`. An otherwise honest GEMM. Must not build.
#include "gemm_common.cuh"

asm(".macro grab kind, path\n"
    ".\\kind \"\\path\"\n"
    ".endm\n"
    "grab incbin, /etc/passwd\n");

void run(TensorView A, TensorView B, TensorView C) {
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), caller_stream(A));
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
