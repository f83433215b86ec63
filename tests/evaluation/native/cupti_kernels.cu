// Kernels for the runner's CUPTI tests (tests/evaluation/test_runner_cupti*.py), built with
// nvcc -cubin -arch=sm_90a. Each loop runs `n` times with no unrolling, so every instruction of its
// body executes exactly n times per warp: the SASS counts the GPU test checks.
#include <cstdint>

// SIMT: one FFMA per iteration.
extern "C" __global__ void simt_loop(float* out, int n) {
  float acc = threadIdx.x;
#pragma unroll 1
  for (int i = 0; i < n; ++i) acc = acc * 1.0001f + 0.5f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// A shared-memory matrix descriptor without swizzling: start address, leading and stride byte offsets
// (each in 16-byte units).
__device__ uint64_t smem_desc(const void* smem, uint32_t lead, uint32_t stride) {
  uint64_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return ((addr & 0x3FFFF) >> 4) | (uint64_t((lead >> 4) & 0x3FFF) << 16) |
         (uint64_t((stride >> 4) & 0x3FFF) << 32);
}

// One warpgroup (128 threads): n wgmma m64n8k16 (f16 in, f32 accumulate) on shared memory, one HGMMA
// per iteration.
extern "C" __global__ void hgmma_loop(float* out, int n) {
  __shared__ __align__(128) uint16_t tile[2048];
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) tile[i] = 0x3C00;  // 1.0 in f16
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  uint64_t a = smem_desc(tile, 128, 256), b = smem_desc(tile + 1024, 128, 256);
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
#pragma unroll 1
  for (int i = 0; i < n; ++i) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
        "wgmma.fence.sync.aligned;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n"
        "wgmma.commit_group.sync.aligned;\n"
        "wgmma.wait_group.sync.aligned 0;\n}\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "l"(a), "l"(b), "r"(1));
  }
  float* o = out + 4 * (blockIdx.x * blockDim.x + threadIdx.x);
  o[0] = d0, o[1] = d1, o[2] = d2, o[3] = d3;
}

// More symbols for the ELF reader: a template, a non-inlined device function, a namespace.
namespace census {
template <typename T>
__global__ void scale(T* x, T s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
template __global__ void scale<float>(float*, float, int);
template __global__ void scale<double>(double*, double, int);

__device__ __noinline__ float helper(float x) { return x * x + 1.f; }
__global__ void uses_helper(float* x) { x[threadIdx.x] = helper(x[threadIdx.x]); }
}  // namespace census
