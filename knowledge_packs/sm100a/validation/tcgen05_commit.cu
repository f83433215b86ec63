// Validation kernels, group "commit": tcgen05.commit to mbarriers driving a pipelined K loop, and the
// multicast commit that signals barriers in several CTAs of a cluster.
// Expected SASS family: UTCBAR (UTCBAR.MULTICAST for the multicast form); the kernels also issue
// UTCHMMA and LDTM.
// Compiled for sm_100a in ptxgym's CPU tests; NOT run: no B200 was available. On a B200:
//   umma_pipeline_kernel<<<1, 192>>>(A, B, D, k_tiles): D[128][64] = A[128][64*k_tiles] . B[64][64*k_tiles]^T
//     (fp32), with a 2-stage smem ring: warp 4 produces stages, warp 5 issues MMAs and commits each
//     stage back to its "empty" barrier, warps 0-3 read the accumulator after the final commit.
//   commit_multicast_kernel<<<2, 128>>>(A, B, D): cluster of 2; each CTA computes its own 128 x 64 tile
//     (A rows 128r.., same B) and multicasts its commit to BOTH CTAs' barrier (count 2), so each CTA
//     proceeds only when both tiles are finished.
#include "../headers/common.cuh"
#include "../headers/mbarrier.cuh"
#include "../headers/tcgen05_alloc.cuh"
#include "../headers/tcgen05_commit.cuh"
#include "../headers/tcgen05_desc.cuh"
#include "../headers/tcgen05_ldst.cuh"
#include "../headers/tcgen05_mma.cuh"

constexpr uint32_t kM = 128, kN = 64, kBK = 64, kStages = 2;

// 64-wide K slice `kt` of `rows` rows (row stride ld) -> canonical 128B-swizzled K-major smem tile.
__device__ void load_slice_sw128(uint8_t* smem, const __nv_bfloat16* g, uint32_t ld, uint32_t rows, uint32_t kt,
                                 uint32_t tid, uint32_t nthreads) {
  for (uint32_t i = tid; i < rows * 8; i += nthreads) {
    const uint32_t r = i / 8, c = i % 8;
    const uint4 v = *reinterpret_cast<const uint4*>(g + r * ld + kt * kBK + c * 8);
    *reinterpret_cast<uint4*>(smem + r * 128 + ((c ^ (r & 7)) * 16)) = v;
  }
}

__device__ void issue_tile_mmas(uint32_t tmem, const uint8_t* sA, const uint8_t* sB, bool accumulate_first) {
  constexpr uint32_t idesc = sm100::make_idesc_bf16_f32(kM, kN);
  const uint64_t a0 = sm100::make_smem_desc_kmajor_sw128(sm100::smem_u32(sA));
  const uint64_t b0 = sm100::make_smem_desc_kmajor_sw128(sm100::smem_u32(sB));
#pragma unroll
  for (uint32_t k = 0; k < kBK / 16; ++k)
    sm100::umma_f16_ss<1>(tmem, sm100::smem_desc_advance(a0, 32 * k), sm100::smem_desc_advance(b0, 32 * k), idesc,
                          accumulate_first || k > 0);
}

__device__ void epilogue_rows(uint32_t tmem, float* D, uint32_t row0) {
  const uint32_t slice = sm100::tmem_warp_slice(tmem);
  const uint32_t row = row0 + 32 * (sm100::warp_id() & 3u) + sm100::lane_id();
#pragma unroll
  for (uint32_t col = 0; col < kN; col += 8) {
    uint32_t v[8];
    sm100::tmem_ld_32x32b_x8(sm100::tmem_addr(slice, 0, col), v);
    sm100::tmem_ld_wait(v);
#pragma unroll
    for (int j = 0; j < 8; ++j) D[row * kN + col + j] = __uint_as_float(v[j]);
  }
}

__global__ void __launch_bounds__(192)
    umma_pipeline_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D, uint32_t k_tiles) {
  __shared__ __align__(1024) uint8_t sA[kStages][kM * 128];
  __shared__ __align__(1024) uint8_t sB[kStages][kN * 128];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages], acc_full;
  __shared__ uint32_t tmem_slot;
  const uint32_t warp = sm100::warp_id();
  const uint32_t ld = k_tiles * kBK;

  if (warp == 5) {
    sm100::tmem_alloc<1>(sm100::smem_u32(&tmem_slot), kN);
    sm100::tmem_relinquish_alloc_permit<1>();
  }
  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < kStages; ++s) {
      sm100::mbar_init(sm100::smem_u32(&full[s]), 1);   // producer's arrive
      sm100::mbar_init(sm100::smem_u32(&empty[s]), 1);  // MMA thread's commit
    }
    sm100::mbar_init(sm100::smem_u32(&acc_full), 1);    // final commit
    sm100::mbar_fence_init();
  }
  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  sm100::tcgen05_fence_after_thread_sync();
  const uint32_t tmem = tmem_slot;

  if (warp == 4) {  // producer: generic stores, then proxy fence, then arrive
    sm100::RingState<kStages> ring;
    for (uint32_t kt = 0; kt < k_tiles; ++kt, ring.advance()) {
      sm100::mbar_wait(sm100::smem_u32(&empty[ring.stage]), ring.phase ^ 1u);
      load_slice_sw128(sA[ring.stage], A, ld, kM, kt, sm100::lane_id(), 32);
      load_slice_sw128(sB[ring.stage], B, ld, kN, kt, sm100::lane_id(), 32);
      sm100::fence_proxy_async_smem();
      __syncwarp();
      if (sm100::lane_id() == 0) sm100::mbar_arrive(sm100::smem_u32(&full[ring.stage]));
    }
  } else if (warp == 5) {  // MMA issuer: one elected thread
    sm100::RingState<kStages> ring;
    for (uint32_t kt = 0; kt < k_tiles; ++kt, ring.advance()) {
      sm100::mbar_wait(sm100::smem_u32(&full[ring.stage]), ring.phase);
      sm100::tcgen05_fence_after_thread_sync();
      if (sm100::elect_one_sync()) {
        issue_tile_mmas(tmem, sA[ring.stage], sB[ring.stage], kt > 0);
        sm100::umma_commit<1>(sm100::smem_u32(&empty[ring.stage]));  // stage free once MMAs read it
        if (kt + 1 == k_tiles) sm100::umma_commit<1>(sm100::smem_u32(&acc_full));
      }
      __syncwarp();
    }
  } else {  // warps 0-3: epilogue
    sm100::mbar_wait(sm100::smem_u32(&acc_full), 0);
    sm100::tcgen05_fence_after_thread_sync();
    epilogue_rows(tmem, D, 0);
  }

  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 5) sm100::tmem_dealloc<1>(tmem, kN);
}

__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)
    commit_multicast_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D) {
  __shared__ __align__(1024) uint8_t sA[kM * 128];
  __shared__ __align__(1024) uint8_t sB[kN * 128];
  __shared__ __align__(8) uint64_t both_done;
  __shared__ uint32_t tmem_slot;
  const uint32_t warp = sm100::warp_id();
  const uint32_t rank = sm100::cluster_ctarank();

  load_slice_sw128(sA, A + rank * kM * kBK, kBK, kM, 0, threadIdx.x, blockDim.x);
  load_slice_sw128(sB, B, kBK, kN, 0, threadIdx.x, blockDim.x);
  sm100::fence_proxy_async_smem();
  if (warp == 0) {
    sm100::tmem_alloc<1>(sm100::smem_u32(&tmem_slot), kN);
    sm100::tmem_relinquish_alloc_permit<1>();
  }
  if (threadIdx.x == 32) {
    sm100::mbar_init(sm100::smem_u32(&both_done), 2);  // one commit arrives from each CTA
    sm100::mbar_fence_init();
  }
  sm100::tcgen05_fence_before_thread_sync();
  sm100::cluster_sync();  // barriers of both CTAs initialised before any remote arrive
  sm100::tcgen05_fence_after_thread_sync();
  const uint32_t tmem = tmem_slot;

  if (warp == 0 && sm100::elect_one_sync()) {
    issue_tile_mmas(tmem, sA, sB, false);
    sm100::umma_commit_multicast<1>(sm100::smem_u32(&both_done), 0b11);
  }
  __syncwarp();
  sm100::mbar_wait<true>(sm100::smem_u32(&both_done), 0);
  sm100::tcgen05_fence_after_thread_sync();
  epilogue_rows(tmem, D, rank * kM);

  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) sm100::tmem_dealloc<1>(tmem, kN);
}
