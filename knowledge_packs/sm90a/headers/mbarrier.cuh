// mbarrier.cuh - shared-memory transaction barriers (mbarrier) for sm_90a.
//
// An mbarrier is a 64-bit object in shared memory (8-byte aligned) that counts two things in its
// current phase: pending thread arrivals and pending transaction bytes (tx-count). The phase completes
// when both reach zero; the barrier then flips to the next phase (its parity bit toggles) and reloads
// the arrival count given at init. Waiters name the parity of the phase they wait for.
//
// Typical producer/consumer ring ("full" barriers count bytes, "empty" barriers count consumers):
//   init(full[s], 1); init(empty[s], n_consumers); fence_mbarrier_init(); __syncthreads();
//   producer: wait(empty[s], phase ^ 1); arrive_expect_tx(full[s], bytes); TMA loads -> full[s]
//   consumer: wait(full[s], phase); ... use stage s ...; arrive(empty[s])
// where `phase` starts at 0 and flips each time the ring index s wraps around.
#pragma once

#include "common.cuh"

#ifndef SM90_MBAR_TIMEOUT_NS
// A wait that has not completed after this many nanoseconds is treated as a hang (see mbar_wait).
// Legitimate waits in a kernel that runs for milliseconds are far shorter. 0 disables the check.
#define SM90_MBAR_TIMEOUT_NS 2000000000ull
#endif

namespace sm90 {

// mbarrier.init.shared::cta.b64 [bar], count: set the expected arrival count of every phase
// (1 <= count < 2^20), tx-count 0, phase 0. One thread initialises; before any other thread (or
// the TMA unit, or another CTA of the cluster) uses the barrier, make the init visible with
// fence_mbarrier_init() and a CTA/cluster barrier.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

// mbarrier.inval: return the barrier's memory to ordinary use (needed only if the 8 bytes are
// reused for other data while the CTA still runs).
__device__ __forceinline__ void mbar_inval(uint64_t* bar) {
    asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// fence.mbarrier_init.release.cluster: makes preceding mbarrier.init of this thread visible to the
// async proxy (TMA complete_tx) and to other CTAs of the cluster. Follow it with __syncthreads() or,
// in a cluster, cluster_sync().
__device__ __forceinline__ void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// mbarrier.arrive (release, CTA scope): one arrival on the current phase. The returned state token
// is discarded (`_` sink); waits here use the parity form instead.
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// mbarrier.arrive with a count: `count` arrivals at once (e.g. one thread arriving for its warp).
__device__ __forceinline__ void mbar_arrive_cnt(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

// mbarrier.arrive.expect_tx: first raise the phase's tx-count by `bytes`, then arrive once. The
// producer calls it before (or right after) issuing TMA loads that signal `bar`; the phase can only
// complete after the loads have delivered exactly `bytes` bytes. The byte count must equal the sum
// of the boxes' sizes (box elements * element size, including out-of-bounds fill) or the phase
// never completes (too many) or completes early (too few). tx-count range is +-(2^20 - 1).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// mbarrier.expect_tx: raise tx-count without arriving (when the arrival is done elsewhere).
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;"
                 ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// Arrive on the mbarrier at the same shared-memory offset in CTA `cta_rank` of the cluster (the
// local one included). `mapa` translates the local address into the peer's .shared::cluster window.
// Default semantics (release at CTA scope): enough to hand a smem stage back to a TMA producer after
// wgmma_wait (both sides are async-proxy operations ordered by the barrier itself), and it compiles
// to a bare SYNCS arrive. Use mbar_arrive_cluster_release when the peer must also see this thread's
// ordinary memory writes (e.g. st.shared::cluster data): that one costs a MEMBAR.GPU per call.
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta_rank) {
    asm volatile(
        "{\n\t.reg .b32 remote;\n\t"
        "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}"
        ::"r"(smem_u32(bar)), "r"(cta_rank) : "memory");
}

// Remote arrive with release at cluster scope (orders all earlier memory operations of this thread).
__device__ __forceinline__ void mbar_arrive_cluster_release(uint64_t* bar, uint32_t cta_rank) {
    asm volatile(
        "{\n\t.reg .b32 remote;\n\t"
        "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n\t}"
        ::"r"(smem_u32(bar)), "r"(cta_rank) : "memory");
}

// mbarrier.try_wait.parity (acquire, CTA scope): true when the phase with parity `parity` has
// completed. The hardware may suspend the thread for a while before returning false, so a loop
// around it is not a hot spin. After it returns true, the data the phase guarded (TMA bytes, writes
// released by arrivers) is visible to this thread.
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n\t.reg .pred P;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, P;\n\t}"
        : "=r"(ok) : "r"(smem_u32(bar)), "r"(parity) : "memory");
    return ok != 0;
}

// Same with acquire at cluster scope: needed only when this thread then reads ordinary data that
// other CTAs released (it adds an L1 invalidate, CCTL.IVALL, after success). A TMA producer waiting
// on "empty" barriers that remote consumers arrive on does not need it: use mbar_try_wait.
__device__ __forceinline__ bool mbar_try_wait_cluster(uint64_t* bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n\t.reg .pred P;\n\t"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, P;\n\t}"
        : "=r"(ok) : "r"(smem_u32(bar)), "r"(parity) : "memory");
    return ok != 0;
}

// mbarrier.test_wait.parity: like try_wait but never suspends (a pure poll).
__device__ __forceinline__ bool mbar_test_wait(uint64_t* bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n\t.reg .pred P;\n\t"
        "mbarrier.test_wait.parity.shared::cta.b64 P, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, P;\n\t}"
        : "=r"(ok) : "r"(smem_u32(bar)), "r"(parity) : "memory");
    return ok != 0;
}

// Bounded wait: returns true once the phase `parity` completed, false if `timeout_ns` passed first
// (the barrier is then still pending: the caller decides how to report it). The clock is only read
// after a try_wait came back false, so the fast path costs one try_wait.
template <bool kClusterScope = false>
__device__ __forceinline__ bool mbar_wait_bounded(uint64_t* bar, uint32_t parity, uint64_t timeout_ns) {
    if (kClusterScope ? mbar_try_wait_cluster(bar, parity) : mbar_try_wait(bar, parity)) return true;
    const uint64_t start = global_timer_ns();
    while (true) {
        if (kClusterScope ? mbar_try_wait_cluster(bar, parity) : mbar_try_wait(bar, parity)) return true;
        if (timeout_ns != 0 && global_timer_ns() - start > timeout_ns) return false;
    }
}

// The wait kernels should use: blocks until phase `parity` of `bar` completed; if that takes longer
// than SM90_MBAR_TIMEOUT_NS it traps, so a lost arrival or a wrong expect_tx byte count ends the launch
// with cudaErrorLaunchFailure instead of hanging the GPU. No function call on any path, so it may sit
// between a wgmma and its wait (the consumer side of a pipeline). Define SM90_MBAR_TIMEOUT_NS=0 to
// wait without limit.
template <bool kClusterScope = false>
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    if (!mbar_wait_bounded<kClusterScope>(bar, parity, SM90_MBAR_TIMEOUT_NS)) trap_now();
}

// Same, but prints which barrier (shared address) and parity hung, from which block/thread, before
// trapping. printf is a function call: a kernel that contains it gets all its wgmma serialised by
// ptxas (see trap_with_message), so use it only in kernels without wgmma or in debug builds.
template <bool kClusterScope = false>
__device__ __forceinline__ void mbar_wait_verbose(uint64_t* bar, uint32_t parity) {
    if (!mbar_wait_bounded<kClusterScope>(bar, parity, SM90_MBAR_TIMEOUT_NS)) {
        trap_with_message("mbarrier wait timed out (lost arrival or wrong expect_tx bytes?); a=smem addr, b=parity",
                          smem_u32(bar), parity);
    }
}

}  // namespace sm90
