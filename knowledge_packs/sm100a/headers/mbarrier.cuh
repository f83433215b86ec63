// mbarrier.cuh -- shared-memory transaction barriers (mbarrier) for sm_100a, with a bounded wait.
// Same PTX as on Hopper. Every function takes the barrier's 32-bit shared address (smem_u32(&bar)).
//
// Object: a 64-bit, 8-byte aligned __shared__ word. It holds a phase bit, a pending-arrival count
// (reset to the init count when a phase completes) and a transaction count in bytes (tx-count).
// A phase completes when pending arrivals reach 0 AND tx-count is 0. Waiters wait on the parity of
// the phase they expect to complete: first wait uses parity 0, then 1, 0, 1, ...
//   - arrive            : pending -= 1
//   - expect_tx(n)      : tx-count += n (does not arrive)
//   - arrive_expect_tx  : tx-count += n, then pending -= 1 (one instruction; the TMA issuer's call)
//   - TMA completion    : tx-count -= bytes written (complete_tx), no arrival
//   - tcgen05.commit    : one arrival when all earlier tcgen05 async ops of the issuing thread finish
#ifndef SM100_MBARRIER_CUH
#define SM100_MBARRIER_CUH

#ifndef SM100_COMMON_CUH
#include "common.cuh"
#endif
#include <cstdio>

// Wall-clock bound of mbar_wait. A kernel whose barrier never completes (wrong arrival count, wrong
// tx bytes, wrong parity) prints where it hung and traps instead of spinning until the harness kills it.
#ifndef SM100_MBAR_TIMEOUT_NS
#define SM100_MBAR_TIMEOUT_NS 4000000000ull
#endif

namespace sm100 {

// Executed by ONE thread. count = number of arrive() calls that complete a phase (not bytes).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Make initialised barriers visible to the async proxy (TMA, tcgen05) and to other CTAs of the
// cluster. Sequence: one thread inits all barriers -> mbar_fence_init() -> __syncthreads()
// (or cluster_sync() when other CTAs will arrive on them or multicast into them).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Arrive on the barrier at shared::cluster address `bar_cluster` (from mapa_shared(bar, rank)),
// possibly in another CTA. Release at cluster scope: earlier writes are visible to its waiters.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar_cluster) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar_cluster)
               : "memory");
}

// The producer's call before issuing TMA loads that complete on `bar`: announce the total bytes all
// those loads will write (sum over every TMA that names this barrier, including multicast ones
// issued by other CTAs into this CTA) and arrive once.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Add to the expected byte count without arriving.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// One probe: true when the phase with this parity has completed. try_wait may suspend the thread
// for a hardware-chosen time before returning false, so a loop around it is not a hot spin.
template <bool kClusterScope = false>
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  if constexpr (kClusterScope) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } else {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  }
  return done != 0;
}

inline __device__ __noinline__ void mbar_report_hang(uint32_t bar, uint32_t parity) {
  printf("sm100::mbar_wait: no phase completion after %llu ns: block (%d,%d,%d) thread %d, "
         "smem barrier 0x%x, parity %u. Check arrival counts, expect_tx bytes and parity.\n",
         static_cast<unsigned long long>(SM100_MBAR_TIMEOUT_NS), blockIdx.x, blockIdx.y, blockIdx.z,
         threadIdx.x, bar, parity);
  __trap();
}

// Wait until the phase with `parity` completes; trap with a message after SM100_MBAR_TIMEOUT_NS.
// kClusterScope = true when the completing arrive came from another CTA (remote arrive,
// multicast tcgen05.commit) and this thread then reads data that CTA produced.
template <bool kClusterScope = false>
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  if (mbar_try_wait<kClusterScope>(bar, parity)) return;
  const uint64_t start = globaltimer_ns();
  while (!mbar_try_wait<kClusterScope>(bar, parity)) {
    if (globaltimer_ns() - start > SM100_MBAR_TIMEOUT_NS) mbar_report_hang(bar, parity);
  }
}

// Stage index and phase bit of a kStages-deep ring of (full, empty) barrier pairs.
// Consumer waits full[stage] with `phase`; producer waits empty[stage] with `phase ^ 1`
// (the empty barriers start "free": the first producer wait on parity 1 returns at once).
template <uint32_t kStages>
struct RingState {
  uint32_t stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace sm100

#endif  // SM100_MBARRIER_CUH
