// Validation kernels, group "mma": tcgen05.mma .kind::f16 (bf16 in, fp32 accumulate in TMEM) in the
// SS form (A, B from shared memory), the TS form (A from Tensor Memory) and the CTA-pair form.
// Expected SASS family: UTCHMMA (and UTCHMMA.2CTA for the pair kernel).
// Compiled for sm_100a in ptxgym's CPU tests; NOT run: no B200 was available. On a B200 each kernel
// computes D = A . B^T in fp32 with A [M][64] and B [N][64] row-major bf16 (both K-major):
//   umma_ss_kernel   <<<1, 128>>>(A, B, D): M = 128, N = 64
//   umma_ts_kernel   <<<1, 128>>>(A, B, D): M = 128, N = 64, A staged in TMEM (layout assumption:
//                                            row i in lane i, two bf16 per 32-bit column)
//   umma_pair_kernel <<<2, 128>>>(A, B, D): M = 256, N = 64 over a cluster of 2 (CTA r holds A rows
//                                            128r.., B rows 32r.., and receives D rows 128r..)
// Compare against a float reference with |err| <= 1e-2 * (1 + |ref|).
#include "../headers/common.cuh"
#include "../headers/mbarrier.cuh"
#include "../headers/tcgen05_alloc.cuh"
#include "../headers/tcgen05_commit.cuh"
#include "../headers/tcgen05_desc.cuh"
#include "../headers/tcgen05_ldst.cuh"
#include "../headers/tcgen05_mma.cuh"

constexpr uint32_t kK = 64;  // one 128-byte swizzle row of bf16 per matrix row
constexpr uint32_t kN = 64;

static_assert(sm100::umma_f16_shape_ok(1, 128, kN), "cta_group::1 shape");
static_assert(sm100::umma_f16_shape_ok(2, 256, kN), "cta_group::2 shape");
// idesc of bf16 x bf16 -> f32, M = 128, N = 64, K-major: D type bit 4, A/B bf16 bits 7 and 10,
// N >> 3 = 8 at bit 17, M >> 4 = 8 at bit 24.
static_assert(sm100::make_idesc_bf16_f32(128, 64) == ((1u << 4) | (1u << 7) | (1u << 10) | (8u << 17) | (8u << 24)),
              "instruction descriptor layout");
static_assert(sm100::make_smem_desc_kmajor_sw128(0x400) ==
                  ((0x400ull >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 46) | (2ull << 61)),
              "shared-memory descriptor layout");

// Copy `rows` rows of 64 bf16 from global into the canonical K-major 128B-swizzled smem layout that a
// TMA SWIZZLE_128B load would produce: 16-byte chunk c of row r lands at r*128 + ((c ^ (r % 8)) * 16).
__device__ void fill_sw128(uint8_t* smem, const __nv_bfloat16* g, uint32_t rows) {
  for (uint32_t i = threadIdx.x; i < rows * 8; i += blockDim.x) {
    const uint32_t r = i / 8, c = i % 8;
    const uint4 v = *reinterpret_cast<const uint4*>(g + r * kK + c * 8);
    *reinterpret_cast<uint4*>(smem + r * 128 + ((c ^ (r & 7)) * 16)) = v;
  }
  sm100::fence_proxy_async_smem();
}

// Each warp reads its 32 accumulator rows (one per thread) and writes them as fp32.
__device__ void store_accumulator(uint32_t tmem_base, float* d, uint32_t row0) {
  const uint32_t slice = sm100::tmem_warp_slice(tmem_base);
  const uint32_t row = row0 + threadIdx.x;  // thread t of warp w holds row 32*w + t
#pragma unroll
  for (uint32_t col = 0; col < kN; col += 16) {
    uint32_t v[16];
    sm100::tmem_ld_32x32b_x16(sm100::tmem_addr(slice, 0, col), v);
    sm100::tmem_ld_wait(v);
#pragma unroll
    for (int j = 0; j < 16; ++j) d[row * kN + col + j] = __uint_as_float(v[j]);
  }
}

__global__ void __launch_bounds__(128) umma_ss_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D) {
  __shared__ __align__(1024) uint8_t sA[128 * 128];
  __shared__ __align__(1024) uint8_t sB[kN * 128];
  __shared__ __align__(8) uint64_t mma_done;
  __shared__ uint32_t tmem_slot;
  const uint32_t warp = sm100::warp_id();

  fill_sw128(sA, A, 128);
  fill_sw128(sB, B, kN);
  if (warp == 0) {
    sm100::tmem_alloc<1>(sm100::smem_u32(&tmem_slot), kN);
    sm100::tmem_relinquish_alloc_permit<1>();
  }
  if (threadIdx.x == 32) {
    sm100::mbar_init(sm100::smem_u32(&mma_done), 1);
    sm100::mbar_fence_init();
  }
  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  sm100::tcgen05_fence_after_thread_sync();
  const uint32_t tmem = tmem_slot;

  if (warp == 0 && sm100::elect_one_sync()) {
    constexpr uint32_t idesc = sm100::make_idesc_bf16_f32(128, kN);
    const uint64_t a0 = sm100::make_smem_desc_kmajor_sw128(sm100::smem_u32(sA));
    const uint64_t b0 = sm100::make_smem_desc_kmajor_sw128(sm100::smem_u32(sB));
#pragma unroll
    for (uint32_t k = 0; k < kK / 16; ++k)  // K = 16 per MMA = 32 bytes along the swizzled row
      sm100::umma_f16_ss<1>(tmem, sm100::smem_desc_advance(a0, 32 * k), sm100::smem_desc_advance(b0, 32 * k),
                            idesc, k > 0);
    sm100::umma_commit<1>(sm100::smem_u32(&mma_done));
  }
  __syncwarp();
  sm100::mbar_wait(sm100::smem_u32(&mma_done), 0);
  sm100::tcgen05_fence_after_thread_sync();
  store_accumulator(tmem, D, 32 * warp);

  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) sm100::tmem_dealloc<1>(tmem, kN);
}

__global__ void __launch_bounds__(128) umma_ts_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D) {
  __shared__ __align__(1024) uint8_t sB[kN * 128];
  __shared__ __align__(8) uint64_t mma_done;
  __shared__ uint32_t tmem_slot;
  const uint32_t warp = sm100::warp_id();

  fill_sw128(sB, B, kN);
  if (warp == 0) {
    sm100::tmem_alloc<1>(sm100::smem_u32(&tmem_slot), 128);  // columns 0..63: D, 64..95: A
    sm100::tmem_relinquish_alloc_permit<1>();
  }
  if (threadIdx.x == 32) {
    sm100::mbar_init(sm100::smem_u32(&mma_done), 1);
    sm100::mbar_fence_init();
  }
  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  sm100::tcgen05_fence_after_thread_sync();
  const uint32_t tmem = tmem_slot;
  const uint32_t a_tmem = sm100::tmem_addr(tmem, 0, kN);

  // Stage A in TMEM: thread t of warp w writes row 32w + t, 64 bf16 packed into 32 columns.
  {
    const uint32_t row = threadIdx.x;
    uint32_t packed[32];
#pragma unroll
    for (int j = 0; j < 32; ++j)
      packed[j] = sm100::pack_bf16x2(__bfloat162float(A[row * kK + 2 * j]), __bfloat162float(A[row * kK + 2 * j + 1]));
    sm100::tmem_st_32x32b_x32(sm100::tmem_addr(sm100::tmem_warp_slice(tmem), 0, kN), packed);
    sm100::tmem_st_wait();
  }
  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  sm100::tcgen05_fence_after_thread_sync();

  if (warp == 0 && sm100::elect_one_sync()) {
    constexpr uint32_t idesc = sm100::make_idesc_bf16_f32(128, kN);
    const uint64_t b0 = sm100::make_smem_desc_kmajor_sw128(sm100::smem_u32(sB));
#pragma unroll
    for (uint32_t k = 0; k < kK / 16; ++k)  // 16 bf16 of A = 8 TMEM columns
      sm100::umma_f16_ts<1>(tmem, a_tmem + 8 * k, sm100::smem_desc_advance(b0, 32 * k), idesc, k > 0);
    sm100::umma_commit<1>(sm100::smem_u32(&mma_done));
  }
  __syncwarp();
  sm100::mbar_wait(sm100::smem_u32(&mma_done), 0);
  sm100::tcgen05_fence_after_thread_sync();
  store_accumulator(tmem, D, 32 * warp);

  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) sm100::tmem_dealloc<1>(tmem, 128);
}

__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)
    umma_pair_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D) {
  __shared__ __align__(1024) uint8_t sA[128 * 128];      // this CTA's 128 rows of A
  __shared__ __align__(1024) uint8_t sB[(kN / 2) * 128];  // this CTA's N/2 rows of B
  __shared__ __align__(8) uint64_t mma_done;
  __shared__ uint32_t tmem_slot;
  const uint32_t warp = sm100::warp_id();
  const uint32_t rank = sm100::cluster_ctarank();

  fill_sw128(sA, A + rank * 128 * kK, 128);
  fill_sw128(sB, B + rank * (kN / 2) * kK, kN / 2);
  if (warp == 0) {
    sm100::tmem_alloc<2>(sm100::smem_u32(&tmem_slot), kN);
    sm100::tmem_relinquish_alloc_permit<2>();
  }
  if (threadIdx.x == 32) {
    sm100::mbar_init(sm100::smem_u32(&mma_done), 1);
    sm100::mbar_fence_init();
  }
  // Both CTAs' operands, barriers and TMEM must be ready before the leader issues the pair MMA.
  sm100::tcgen05_fence_before_thread_sync();
  sm100::cluster_sync();
  sm100::tcgen05_fence_after_thread_sync();
  const uint32_t tmem = tmem_slot;

  if (rank == 0 && warp == 0 && sm100::elect_one_sync()) {
    constexpr uint32_t idesc = sm100::make_idesc_bf16_f32(256, kN);  // the pair's full M and N
    const uint64_t a0 = sm100::make_smem_desc_kmajor_sw128(sm100::smem_u32(sA));
    const uint64_t b0 = sm100::make_smem_desc_kmajor_sw128(sm100::smem_u32(sB));
#pragma unroll
    for (uint32_t k = 0; k < kK / 16; ++k)
      sm100::umma_f16_ss<2>(tmem, sm100::smem_desc_advance(a0, 32 * k), sm100::smem_desc_advance(b0, 32 * k),
                            idesc, k > 0);
    sm100::umma_commit_multicast<2>(sm100::smem_u32(&mma_done), 0b11);  // arrive in both CTAs
  }
  __syncwarp();
  sm100::mbar_wait<true>(sm100::smem_u32(&mma_done), 0);
  sm100::tcgen05_fence_after_thread_sync();
  store_accumulator(tmem, D, rank * 128 + 32 * warp);

  sm100::tcgen05_fence_before_thread_sync();
  sm100::cluster_sync();
  if (warp == 0) sm100::tmem_dealloc<2>(tmem, kN);
}
