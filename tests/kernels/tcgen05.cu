// Blackwell tcgen05 test solution (sm_100a): each block allocates 32 columns of tensor memory, every
// thread writes one value into its TMEM lane with tcgen05.st, reads it back with tcgen05.ld, and the
// allocating warp frees the columns. Built for sm_100a it must show UTC* / STTM / LDTM in the SASS;
// built for sm_90a ptxas must refuse it (wrong-architecture test).
#include <cstdint>

#include <cuda_runtime.h>
#include <tvm/ffi/tvm_ffi.h>
#include <tvm/ffi/extra/c_env_api.h>

constexpr uint32_t kColumns = 32;

__global__ void __launch_bounds__(128) tmem_roundtrip(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ uint32_t tmem_base;
  const int warp = threadIdx.x / 32;
  if (warp == 0) {
    const uint32_t slot = static_cast<uint32_t>(__cvta_generic_to_shared(&tmem_base));
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(slot), "r"(kColumns)
                 : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
  }
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  __syncthreads();
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");

  // Warp w may touch TMEM lanes 32w..32w+31: the lane index sits in the upper 16 bits of the address.
  const uint32_t taddr = tmem_base + (static_cast<uint32_t>(warp * 32) << 16);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t in = __float_as_uint(i < n ? x[i] : 0.0f);
  asm volatile("tcgen05.st.sync.aligned.32x32b.x1.b32 [%0], {%1};" ::"r"(taddr), "r"(in) : "memory");
  asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory");
  uint32_t out;
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x1.b32 {%0}, [%1];" : "=r"(out) : "r"(taddr) : "memory");
  asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
  if (i < n) y[i] = __uint_as_float(out) + 1.0f;

  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  __syncthreads();
  if (warp == 0) {
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(tmem_base), "r"(kColumns)
                 : "memory");
  }
}

// y = x + 1 through tensor memory.
void run(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
  const int n = static_cast<int>(x.size(0));
  auto dev = x.device();
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(dev.device_type, dev.device_id));
  tmem_roundtrip<<<(n + 127) / 128, 128, 0, stream>>>(static_cast<const float*>(x.data_ptr()),
                                                     static_cast<float*>(y.data_ptr()), n);
  cudaError_t err = cudaGetLastError();
  TVM_FFI_ICHECK(err == cudaSuccess) << cudaGetErrorString(err);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
