// tcgen05_commit.cuh -- completion tracking and ordering of tcgen05 operations on sm_100a.
// SASS: UTCBAR (commit), UTCBAR.MULTICAST / UTCBAR.2CTA.MULTICAST (with a CTA mask). The two fences
// below constrain ordering; ptxas often emits no instruction for them, which does not make them optional.
//
// tcgen05.commit: makes the mbarrier at `bar` receive ONE arrive once every asynchronous tcgen05
// operation (mma, cp, shift) previously issued BY THIS THREAD and not yet committed has completed.
//  * Issue it from the same single thread that issued the MMAs, right after them.
//  * Typical uses in a pipelined GEMM:
//      - after the MMAs of one K stage -> commit to empty[stage]: the smem stage may be refilled;
//      - after the last K stage of a tile -> commit to tmem_full[acc]: the accumulator is ready for
//        the epilogue warps (which then wait on that barrier before tcgen05.ld).
//  * The barrier's init count must include this arrive (e.g. count 1 when only the commit arrives).
//  * cta_group::2 (pair MMA): use the cta_group::2 commit; with the multicast form, the arrive goes to
//    the barrier at the same smem offset in every CTA whose bit is set in cta_mask (bit i = cluster
//    rank i), e.g. mask 0b11 << (rank & ~1) tells both CTAs of the pair that their smem stage is free.
//
// tcgen05 fences order tcgen05 ops of this thread against thread synchronisation (bar.sync,
// mbarrier arrive/wait, cluster barriers):
//  * tcgen05_fence_before_thread_sync(): tcgen05 ops issued BEFORE it are ordered before the next
//    synchronisation this thread performs (e.g. a warp's tcgen05.ld before it arrives on an
//    "accumulator empty" barrier; the alloc before __syncthreads that publishes the TMEM address).
//  * tcgen05_fence_after_thread_sync(): tcgen05 ops issued AFTER it are ordered after the previous
//    synchronisation (e.g. after waiting on tmem_full, before tcgen05.ld; after __syncthreads,
//    before using a TMEM address read from smem).
#ifndef SM100_TCGEN05_COMMIT_CUH
#define SM100_TCGEN05_COMMIT_CUH

#include <cstdint>

namespace sm100 {

template <int kCtaGroup = 1>
__device__ __forceinline__ void umma_commit(uint32_t bar) {
  static_assert(kCtaGroup == 1 || kCtaGroup == 2, "cta_group is 1 or 2");
  if constexpr (kCtaGroup == 1) {
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(bar)
                 : "memory");
  } else {
    asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(bar)
                 : "memory");
  }
}

template <int kCtaGroup = 2>
__device__ __forceinline__ void umma_commit_multicast(uint32_t bar, uint16_t cta_mask) {
  static_assert(kCtaGroup == 1 || kCtaGroup == 2, "cta_group is 1 or 2");
  if constexpr (kCtaGroup == 1) {
    asm volatile(
        "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;"
        ::"r"(bar), "h"(cta_mask) : "memory");
  } else {
    asm volatile(
        "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;"
        ::"r"(bar), "h"(cta_mask) : "memory");
  }
}

__device__ __forceinline__ void tcgen05_fence_before_thread_sync() {
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
}

__device__ __forceinline__ void tcgen05_fence_after_thread_sync() {
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
}

}  // namespace sm100

#endif  // SM100_TCGEN05_COMMIT_CUH
