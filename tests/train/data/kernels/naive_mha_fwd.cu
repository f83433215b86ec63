// Naive MHA forward with LSE for the MhaFwd task: one thread per query row, online softmax in fp32.
// Correct and slow, no tensor cores. Test fixture of the learning test: it must build for sm_90a.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

constexpr int kD = 128;  // head dimension

__global__ void mha_fwd_rows(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                             __nv_bfloat16* O, float* LSE, int rows, int S, float scale) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;  // (b * H + h) * S + query
  if (r >= rows) return;
  const size_t head = (size_t)(r / S) * S * kD;  // first key/value row of this (b, h)
  const __nv_bfloat16* q = Q + (size_t)r * kD;
  float acc[kD];
  for (int d = 0; d < kD; ++d) acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // running max and running sum of exp(score - m)
  for (int j = 0; j < S; ++j) {
    const __nv_bfloat16* k = K + head + (size_t)j * kD;
    const __nv_bfloat16* v = V + head + (size_t)j * kD;
    float s = 0.0f;
    for (int d = 0; d < kD; ++d) s += __bfloat162float(q[d]) * __bfloat162float(k[d]);
    s *= scale;
    const float m_new = fmaxf(m, s);
    const float c = __expf(m - m_new), p = __expf(s - m_new);
    l = l * c + p;
    for (int d = 0; d < kD; ++d) acc[d] = acc[d] * c + p * __bfloat162float(v[d]);
    m = m_new;
  }
  for (int d = 0; d < kD; ++d) O[(size_t)r * kD + d] = __float2bfloat16(acc[d] / l);
  LSE[r] = m + logf(l);
}

void run(tvm::ffi::TensorView Q, tvm::ffi::TensorView K, tvm::ffi::TensorView V, tvm::ffi::TensorView O,
         tvm::ffi::TensorView LSE) {
  const int B = Q.size(0), H = Q.size(1), S = Q.size(2);
  const int rows = B * H * S;
  cudaStream_t stream = (cudaStream_t)TVMFFIEnvGetStream(Q.device().device_type, Q.device().device_id);
  mha_fwd_rows<<<(rows + 127) / 128, 128, 0, stream>>>(
      (const __nv_bfloat16*)Q.data_ptr(), (const __nv_bfloat16*)K.data_ptr(), (const __nv_bfloat16*)V.data_ptr(),
      (__nv_bfloat16*)O.data_ptr(), (float*)LSE.data_ptr(), rows, S, 1.0f / sqrtf((float)kD));
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
