// Issue 11 item 14: the assembler's own `.irp` loop builds the directive (`.\kind` becomes `.incbin`),
// so neither the source nor any string in it spells it. An otherwise honest GEMM. Must not build.
#include "gemm_common.cuh"

asm(".irp kind, incbin\n"
    ".\\kind \"/etc/passwd\"\n"
    ".endr\n");

void run(TensorView A, TensorView B, TensorView C) {
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), caller_stream(A));
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
