// Validation kernels, group "alloc/dealloc": Tensor Memory allocation for one CTA and for a CTA pair.
// Expected SASS family: UTCATOMSWS (alloc: .FIND_AND_SET, dealloc: .AND; .2CTA for the pair).
// Compiled for sm_100a in ptxgym's CPU tests; NOT run: no B200 was available. On a B200:
//  - tmem_alloc_kernel<<<1, 64>>>(out): out[0] = allocated base (expected lane 0, a column < 512),
//    out[1] = the same address seen by warp 1 after the fences and barrier.
//  - tmem_alloc_pair_kernel<<<2, 64>>>(out) (cluster of 2 from __cluster_dims__): out[2r] = base seen
//    by CTA rank r, identical for both CTAs of the pair.
#include "../headers/common.cuh"
#include "../headers/tcgen05_alloc.cuh"
#include "../headers/tcgen05_commit.cuh"

__global__ void __launch_bounds__(64) tmem_alloc_kernel(uint32_t* out) {
  __shared__ uint32_t tmem_slot;
  const uint32_t warp = sm100::warp_id();
  if (warp == 0) {
    sm100::tmem_alloc<1>(sm100::smem_u32(&tmem_slot), 256);  // power of two in [32, 512]
    sm100::tmem_relinquish_alloc_permit<1>();
  }
  // Publish the address: fence before the barrier on the writer side, after it on the reader side.
  sm100::tcgen05_fence_before_thread_sync();
  __syncthreads();
  sm100::tcgen05_fence_after_thread_sync();
  const uint32_t base = tmem_slot;
  if (threadIdx.x == 0) out[0] = base;
  if (threadIdx.x == 32) out[1] = base;
  __syncthreads();
  if (warp == 0) sm100::tmem_dealloc<1>(base, 256);  // same base and column count as the alloc
}

__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(64) tmem_alloc_pair_kernel(uint32_t* out) {
  __shared__ uint32_t tmem_slot;
  const uint32_t warp = sm100::warp_id();
  const uint32_t rank = sm100::cluster_ctarank();
  if (warp == 0) {
    // One warp in EACH CTA of the pair executes the cta_group::2 alloc; both get the same columns.
    sm100::tmem_alloc<2>(sm100::smem_u32(&tmem_slot), 128);
    sm100::tmem_relinquish_alloc_permit<2>();
  }
  sm100::tcgen05_fence_before_thread_sync();
  sm100::cluster_sync();
  sm100::tcgen05_fence_after_thread_sync();
  const uint32_t base = tmem_slot;
  if (threadIdx.x == 0) out[2 * rank] = base;
  // Neither CTA may free while its peer could still touch the pair's columns.
  sm100::cluster_sync();
  if (warp == 0) sm100::tmem_dealloc<2>(base, 128);
}
