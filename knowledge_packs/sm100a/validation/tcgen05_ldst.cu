// Validation kernel, group "ld/st": tcgen05.st / tcgen05.ld round trip through Tensor Memory.
// Expected SASS families: STTM, LDTM (plus UTCATOMSWS for the allocation).
// Compiled for sm_100a in ptxgym's CPU tests; NOT run: no B200 was available. On a B200:
//   tmem_roundtrip_kernel<<<1, 128>>>(in, out) with in = 128 x 56 random words: expected out == in
//     (row r of `in` is stored to TMEM lane r, columns 0..55, by warp r/32, and read back).
//   tmem_row_softmax_kernel<<<1, 256>>>(S, P, rowsum): S = 128 x 64 fp32 scores (log2 domain). Warpgroup 0
//     stages S in TMEM; warpgroup 1 reads one row per thread, writes P = exp2(S - rowmax) as bf16 pairs
//     back into TMEM, reloads them and stores P (128 x 64 bf16) and the row sums. Expected: P matches
//     exp2(S - max) within bf16 rounding; rowsum matches the fp32 sum of exp2(S - max).
#include "../headers/common.cuh"
#include "../headers/tcgen05_alloc.cuh"
#include "../headers/tcgen05_commit.cuh"
#include "../headers/tcgen05_ldst.cuh"

#include <cuda_bf16.h>

constexpr uint32_t kCols = 8 + 16 + 32;  // one x8, one x16 and one x32 access per row

__global__ void __launch_bounds__(128) tmem_roundtrip_kernel(const uint32_t* in, uint32_t* out) {
  __shared__ uint32_t tmem_slot;
  const uint32_t warp = sm100::warp_id();
  const uint32_t row = threadIdx.x;  // warp w owns lanes 32w..32w+31 (w = 0..3 covers w % 4)

  if (warp == 0) {
    sm100::tmem_alloc<1>(sm100::smem_u32(&tmem_slot), 64);
    sm100::tmem_relinquish_alloc_permit<1>();
  }
  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  sm100::tcgen05_fence_after_thread_sync();
  const uint32_t slice = sm100::tmem_warp_slice(tmem_slot);

  uint32_t a[8], b[16], c[32];
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = in[row * kCols + i];
#pragma unroll
  for (int i = 0; i < 16; ++i) b[i] = in[row * kCols + 8 + i];
#pragma unroll
  for (int i = 0; i < 32; ++i) c[i] = in[row * kCols + 24 + i];

  sm100::tmem_st_32x32b_x8(sm100::tmem_addr(slice, 0, 0), a);
  sm100::tmem_st_32x32b_x16(sm100::tmem_addr(slice, 0, 8), b);
  sm100::tmem_st_32x32b_x32(sm100::tmem_addr(slice, 0, 24), c);
  sm100::tmem_st_wait();

  uint32_t ra[8], rb[16], rc[32];
  sm100::tmem_ld_32x32b_x8(sm100::tmem_addr(slice, 0, 0), ra);
  sm100::tmem_ld_32x32b_x16(sm100::tmem_addr(slice, 0, 8), rb);
  sm100::tmem_ld_32x32b_x32(sm100::tmem_addr(slice, 0, 24), rc);
  sm100::tmem_ld_wait(ra);
  sm100::tmem_ld_wait(rb);
  sm100::tmem_ld_wait(rc);

#pragma unroll
  for (int i = 0; i < 8; ++i) out[row * kCols + i] = ra[i];
#pragma unroll
  for (int i = 0; i < 16; ++i) out[row * kCols + 8 + i] = rb[i];
#pragma unroll
  for (int i = 0; i < 32; ++i) out[row * kCols + 24 + i] = rc[i];

  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) sm100::tmem_dealloc<1>(tmem_slot, 64);
}

// Softmax-style hand-off between two warpgroups through TMEM, as an attention kernel does with S and P.
constexpr uint32_t kScoreCols = 64;

__global__ void __launch_bounds__(256, 1)
    tmem_row_softmax_kernel(const float* S, __nv_bfloat16* P, float* rowsum) {
  __shared__ uint32_t tmem_slot;
  const uint32_t warp = sm100::warp_id();
  const bool producer = warp < 4;  // warpgroup 0 stages S; warpgroup 1 computes the softmax
  constexpr uint32_t kStaged = 1;   // named barrier id: "S is in TMEM"

  if (warp == 0) {
    sm100::tmem_alloc<1>(sm100::smem_u32(&tmem_slot), 128);  // columns 0..63: S (fp32), 64..95: P (bf16x2)
    sm100::tmem_relinquish_alloc_permit<1>();
  }
  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  sm100::tcgen05_fence_after_thread_sync();
  const uint32_t slice = sm100::tmem_warp_slice(tmem_slot);  // warps w and w+4 share lane quarter w%4
  const uint32_t row = 32 * (warp & 3u) + sm100::lane_id();

  if (producer) {
    sm100::setmaxnreg_dec<56>();
    uint32_t v[32];
    for (uint32_t half = 0; half < 2; ++half) {
#pragma unroll
      for (int j = 0; j < 32; ++j) v[j] = __float_as_uint(S[row * kScoreCols + 32 * half + j]);
      sm100::tmem_st_32x32b_x32(sm100::tmem_addr(slice, 0, 32 * half), v);
    }
    sm100::tmem_st_wait();
    sm100::tcgen05_fence_before_thread_sync();
    sm100::named_barrier_arrive(kStaged, 256);
  } else {
    sm100::setmaxnreg_inc<192>();
    sm100::named_barrier_sync(kStaged, 256);
    sm100::tcgen05_fence_after_thread_sync();
    uint32_t lo[32], hi[32];  // columns 0..31 and 32..63 of this thread's row
    sm100::tmem_ld_32x32b_x32(sm100::tmem_addr(slice, 0, 0), lo);
    sm100::tmem_ld_32x32b_x32(sm100::tmem_addr(slice, 0, 32), hi);
    sm100::tmem_ld_wait(lo);
    sm100::tmem_ld_wait(hi);
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 32; ++j) mx = fmaxf(mx, fmaxf(__uint_as_float(lo[j]), __uint_as_float(hi[j])));
    float sum = 0.f;  // the whole row is in this thread: no shuffles
    uint32_t p[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const uint32_t* half = j < 16 ? lo : hi;
      const float a = sm100::exp2_approx(__uint_as_float(half[(2 * j) % 32]) - mx);
      const float b = sm100::exp2_approx(__uint_as_float(half[(2 * j + 1) % 32]) - mx);
      sum += a + b;
      p[j] = sm100::pack_bf16x2(a, b);
    }
    sm100::tmem_st_32x32b_x32(sm100::tmem_addr(slice, 0, kScoreCols), p);
    sm100::tmem_st_wait();
    uint32_t back[32];
    sm100::tmem_ld_32x32b_x32(sm100::tmem_addr(slice, 0, kScoreCols), back);
    sm100::tmem_ld_wait(back);
#pragma unroll
    for (int j = 0; j < 32; ++j) reinterpret_cast<uint32_t*>(P)[row * (kScoreCols / 2) + j] = back[j];
    rowsum[row] = sum;
  }
  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) sm100::tmem_dealloc<1>(tmem_slot, 128);
}
