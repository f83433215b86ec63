// tcgen05_alloc.cuh -- Tensor Memory (TMEM) allocation for sm_100a.
// SASS: UTCATOMSWS.FIND_AND_SET (alloc), UTCATOMSWS.AND (dealloc), UVIRTCOUNT.DEALLOC.SMPOOL (relinquish).
//
// TMEM per SM: 128 lanes x 512 columns of 32-bit cells (256 KB). Allocation unit: columns, over all
// 128 lanes. A TMEM address is 32 bits: lane in bits 31..16, column in bits 15..0.
//  * alloc / dealloc / relinquish are WARP-wide (.sync.aligned): all 32 lanes of ONE warp execute
//    them with the same operands. With kCtaGroup = 2, one warp in EACH CTA of the pair executes it;
//    the first may block until its peer warp arrives, and both CTAs get the same columns.
//  * ncols: a power of two, 32 <= ncols <= 512. The allocated base address is written to the
//    shared-memory word `slot` (a shared::cta address); read it after a CTA barrier, preceded by
//    tcgen05_fence_before_thread_sync() and followed by tcgen05_fence_after_thread_sync().
//  * alloc blocks while the columns are not free (another CTA on the SM holds them): size TMEM so
//    co-resident CTAs fit, or run one CTA per SM.
//  * relinquish_alloc_permit: promise that this CTA will not allocate again, which lets a CTA waiting
//    for TMEM on the same SM proceed sooner. Call it right after the (last) alloc.
//  * Free everything before the CTA exits: dealloc with the same base and ncols, after every tcgen05
//    op touching those columns has completed (wait on the final commit barrier / wait::ld first).
#ifndef SM100_TCGEN05_ALLOC_CUH
#define SM100_TCGEN05_ALLOC_CUH

#ifndef SM100_COMMON_CUH
#include "common.cuh"
#endif

namespace sm100 {

template <int kCtaGroup = 1>
__device__ __forceinline__ void tmem_alloc(uint32_t slot, uint32_t ncols) {
  static_assert(kCtaGroup == 1 || kCtaGroup == 2, "cta_group is 1 or 2");
  if constexpr (kCtaGroup == 1) {
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(slot),
                 "r"(ncols) : "memory");
  } else {
    asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(slot),
                 "r"(ncols) : "memory");
  }
}

template <int kCtaGroup = 1>
__device__ __forceinline__ void tmem_dealloc(uint32_t taddr, uint32_t ncols) {
  static_assert(kCtaGroup == 1 || kCtaGroup == 2, "cta_group is 1 or 2");
  if constexpr (kCtaGroup == 1) {
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(taddr), "r"(ncols)
                 : "memory");
  } else {
    asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;" ::"r"(taddr), "r"(ncols)
                 : "memory");
  }
}

template <int kCtaGroup = 1>
__device__ __forceinline__ void tmem_relinquish_alloc_permit() {
  static_assert(kCtaGroup == 1 || kCtaGroup == 2, "cta_group is 1 or 2");
  if constexpr (kCtaGroup == 1) {
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
  } else {
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;" ::: "memory");
  }
}

// Address of (lane, column) relative to an allocation base: lanes in the high half-word.
__host__ __device__ constexpr uint32_t tmem_addr(uint32_t base, uint32_t lane, uint32_t col) {
  return base + (lane << 16) + col;
}

// The 32-lane slice a warp may touch with tcgen05.ld/st is fixed by (warp index % 4):
// warp w of the CTA accesses lanes [32*(w%4), 32*(w%4)+31]. Base address for this warp's slice.
__device__ __forceinline__ uint32_t tmem_warp_slice(uint32_t base) {
  return tmem_addr(base, 32u * (warp_id() & 3u), 0u);
}

}  // namespace sm100

#endif  // SM100_TCGEN05_ALLOC_CUH
