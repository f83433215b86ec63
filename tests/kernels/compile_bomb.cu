// Compile bomb: the macro X16 expands to 2^16 copies of a dependent three-FMA step in one basic block.
// nvcc needs about 20 s and 0.9 GB for it on a 2-core build host (X17 about twice that), so a build limit
// of a few seconds must end it as COMPILE_TIMEOUT.
#include <tvm/ffi/tvm_ffi.h>

#define X0 a = a * b + c; b = b * c + a; c = c * a + b;
#define X1 X0 X0
#define X2 X1 X1
#define X3 X2 X2
#define X4 X3 X3
#define X5 X4 X4
#define X6 X5 X5
#define X7 X6 X6
#define X8 X7 X7
#define X9 X8 X8
#define X10 X9 X9
#define X11 X10 X10
#define X12 X11 X11
#define X13 X12 X12
#define X14 X13 X13
#define X15 X14 X14
#define X16 X15 X15

__global__ void bomb(float* x) {
  float a = x[0], b = x[1], c = x[2];
  X16
  x[3] = a + b + c;
}

void run(tvm::ffi::TensorView x) { bomb<<<1, 1>>>(static_cast<float*>(x.data_ptr())); }

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
