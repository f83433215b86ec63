// Hopper wgmma test solution (sm_90a): one warpgroup computes C[64x8] = A[64x16] * B[8x16]^T in fp32
// with a single inline-PTX wgmma.mma_async.m64n8k16.f32.bf16.bf16 from shared-memory descriptors.
// Used for the static SASS check (HGMMA must appear); the operand layout is the no-swizzle K-major
// canonical layout (8x8 core matrices stored as 128 contiguous bytes).
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/tvm_ffi.h>
#include <tvm/ffi/extra/c_env_api.h>

constexpr int kM = 64, kN = 8, kK = 16;

// Shared-memory matrix descriptor: start address, leading and stride byte offsets (all >> 4), no swizzle.
__device__ uint64_t smem_descriptor(const void* smem, uint32_t leading_bytes, uint32_t stride_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((addr >> 4) & 0x3FFF);
  desc |= static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16;
  desc |= static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32;
  return desc;
}

// Offset (in elements) of element (row, k) in the core-matrix layout: core matrices of 8 rows x 8 k,
// the two k-halves of a row block adjacent (leading offset 128 B), row blocks 256 B apart.
__device__ int core_offset(int row, int k) {
  return (row / 8) * 128 + (k / 8) * 64 + (row % 8) * 8 + (k % 8);
}

__global__ void __launch_bounds__(128) wgmma_tile(const __nv_bfloat16* __restrict__ a,
                                                  const __nv_bfloat16* __restrict__ b, float* __restrict__ c) {
  __shared__ alignas(128) __nv_bfloat16 sa[kM * kK];
  __shared__ alignas(128) __nv_bfloat16 sb[kN * kK];
  for (int i = threadIdx.x; i < kM * kK; i += blockDim.x) sa[core_offset(i / kK, i % kK)] = a[i];
  for (int i = threadIdx.x; i < kN * kK; i += blockDim.x) sb[core_offset(i / kK, i % kK)] = b[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();

  const uint64_t desc_a = smem_descriptor(sa, 128, 256);
  const uint64_t desc_b = smem_descriptor(sb, 128, 256);
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile(
      "{\n"
      ".reg .pred accumulate;\n"
      "setp.ne.b32 accumulate, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, accumulate, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "l"(desc_a), "l"(desc_b), "r"(0));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");

  // Accumulator fragment of m64nNk16: warp w owns rows 16w..16w+15; lane l holds rows
  // 16w + l/4 and +8, columns 2*(l%4) and +1.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = warp * 16 + lane / 4, col = (lane % 4) * 2;
  c[row * kN + col] = d0;
  c[row * kN + col + 1] = d1;
  c[(row + 8) * kN + col] = d2;
  c[(row + 8) * kN + col + 1] = d3;
}

// C[64, 8] (fp32) = A[64, 16] (bf16) * B[8, 16]^T (bf16).
void run(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView c) {
  auto dev = a.device();
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(dev.device_type, dev.device_id));
  wgmma_tile<<<1, 128, 0, stream>>>(static_cast<const __nv_bfloat16*>(a.data_ptr()),
                                    static_cast<const __nv_bfloat16*>(b.data_ptr()),
                                    static_cast<float*>(c.data_ptr()));
  cudaError_t err = cudaGetLastError();
  TVM_FFI_ICHECK(err == cudaSuccess) << cudaGetErrorString(err);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
