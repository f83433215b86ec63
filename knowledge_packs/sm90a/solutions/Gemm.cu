// GENERATED FILE - do not edit. The expert solution Gemm.cu of the ptxgym sm_90a knowledge pack:
// solutions/src/Gemm.cu with every pack header it includes (headers/*.cuh) inlined, so that it is one
// self-contained source, as a policy submits it. Regenerate with
//   python bench/expert_bench.py source > knowledge_packs/sm90a/solutions/Gemm.cu
// Gemm.cu - expert BF16 GEMM for the Gemm-sm90a task, written with the ptxgym sm_90a pack headers.
//
//   C[M, N] = A[M, K] * B[N, K]^T      A, B, C row-major bf16, fp32 accumulation
//   TVM-FFI entry: run(A, B, C), destination-passing, on the caller's stream (TVMFFIEnvGetStream).
//
// Design (one CTA per SM, persistent):
//   * CTA tile 128 x 256, K-step 64. Three warpgroups: WG0 = TMA producer (one elected thread,
//     registers lowered with setmaxnreg), WG1/WG2 = MMA consumers, each owning 64 rows x 256 columns
//     (128 fp32 accumulators per thread, registers raised with setmaxnreg).
//   * A kStages-deep shared-memory ring; per stage one "full" mbarrier (TMA transaction bytes) and one
//     "empty" mbarrier (one arrival per consumer warp of every CTA that reads the stage).
//   * Operands are K-major with the 128-byte swizzle on both sides: TMA boxes {64, rows} with
//     CU_TENSOR_MAP_SWIZZLE_128B, wgmma descriptors with swizzle mode 1, SBO 1024 B, and the k-th 16-wide
//     slice at +32 bytes. Each stage issues 4 x wgmma.m64n256k16 per consumer.
//   * Optional 2-CTA clusters along M (kCluster = 2): the two CTAs compute vertically adjacent tiles
//     with the same B tile; each loads half of B and multicasts it to both, halving B's L2 traffic.
//   * Persistent static schedule over cluster tiles, grouped along M (kGroupRows rows of A per group)
//     so that concurrently running CTAs share A and B panels in L2.
//   * Epilogue: fp32 -> bf16, stmatrix into a 128B-swizzled 64x64 staging tile (two per consumer,
//     double-buffered), fence.proxy.async, TMA store; the producer already streams the next tile.
//
// Compile-time knobs (defaults are the tuned configuration): GEMM_STAGES, GEMM_CLUSTER (1 or 2),
// GEMM_GROUP_ROWS.
#include <cuda_runtime.h>

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

// ---- begin sm90a.cuh
// sm90a.cuh - the whole ptxgym Hopper (sm_90a) wrapper set in one include.

// ---- begin common.cuh
// common.cuh - small building blocks shared by the other sm_90a wrappers.
//
// Part of the ptxgym Hopper knowledge pack. Every wrapper is a __device__ __forceinline__ function
// around one inline-PTX instruction (or a short fixed sequence), in namespace sm90. Build with
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a
// ("sm_90a", not "sm_90": wgmma and setmaxnreg exist only on the architecture-specific target).

#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>

namespace sm90 {

// ---------------------------------------------------------------------------------- addresses

// Shared-memory instructions (mbarrier, cp.async.bulk, wgmma descriptors, ldmatrix/stmatrix) take a
// 32-bit address in the .shared::cta window, not a generic 64-bit pointer. This converts a generic
// pointer that points into this CTA's shared memory (a __shared__ variable or the dynamic buffer).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ------------------------------------------------------------------------------ thread indices

// Lane of the calling thread inside its warp (0..31), read from the %laneid special register.
__device__ __forceinline__ uint32_t lane_id() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
    return r;
}

// Warp index inside the CTA, made warp-uniform with a shuffle so the compiler can keep it in a
// uniform register (branches on it then do not diverge).
__device__ __forceinline__ uint32_t warp_id() {
    return __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
}

// Warpgroup index (4 consecutive warps = 128 threads) of a 1-D CTA. A warpgroup that issues wgmma
// must start at a warp index divisible by 4, which this numbering guarantees.
__device__ __forceinline__ uint32_t warpgroup_id() {
    return __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
}

// Index of the SM the CTA runs on (%smid). Only for diagnostics: it can change between launches.
__device__ __forceinline__ uint32_t sm_id() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}

// Nanoseconds from the global timer (%globaltimer). Coarse (about 1 us steps on some GPUs) but
// monotonic across SMs; used by the bounded waits to decide that a wait has hung.
__device__ __forceinline__ uint64_t global_timer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// elect.sync: exactly one active lane of the (full) warp gets true. Cheaper and clearer than
// "lane_id() == 0" when only some lanes are active; all 32 lanes must execute it.
__device__ __forceinline__ bool elect_one_sync() {
    uint32_t pred = 0;
    asm volatile(
        "{\n\t.reg .pred P;\n\t"
        "elect.sync _|P, 0xffffffff;\n\t"
        "selp.u32 %0, 1, 0, P;\n\t}"
        : "=r"(pred));
    return pred != 0;
}

// -------------------------------------------------------------------------------- conversions

// Two fp32 values -> one 32-bit register holding two bf16 (lo in bits 0..15, hi in 16..31), the
// packing ldmatrix/stmatrix fragments and wgmma register-A operands use. Round to nearest even.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// ------------------------------------------------------------------------------------- fences

// fence.proxy.async.shared::cta: orders this thread's earlier generic-proxy accesses to shared memory
// (plain st.shared, stmatrix, ...) before later async-proxy accesses (TMA stores reading smem,
// wgmma reading smem operands). Every thread that wrote must execute it, then synchronise (bar.sync)
// with the thread that issues the async operation.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// fence.proxy.async.global: the same ordering for global memory (generic writes that a later TMA
// load of the same addresses must observe).
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;" ::: "memory");
}

// fence.proxy.async (all state spaces).
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async;" ::: "memory");
}

// fence.acq_rel.cluster: a memory fence at cluster scope (generic proxy).
__device__ __forceinline__ void fence_acq_rel_cluster() {
    asm volatile("fence.acq_rel.cluster;" ::: "memory");
}

// ------------------------------------------------------------------------------ named barriers

// bar.sync id, count: waits until `count` threads (a multiple of 32, whole warps) have reached named
// barrier `id` (0..15; 0 is the one __syncthreads uses). Lets a subset of warps, e.g. one
// warpgroup (count 128), synchronise without stopping the others.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// bar.arrive id, count: signals arrival at named barrier `id` without waiting (producer side of a
// producer/consumer hand-off between warps; the consumers use named_barrier_sync with the same count).
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t count) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// ------------------------------------------------------------------------- register allocation

// setmaxnreg.inc / .dec: change the per-thread register budget of the executing warpgroup at run
// time (warp-specialised kernels give the TMA producer few registers and the MMA consumers many).
// Rules: N is an immediate in [24, 256] and a multiple of 8; every thread of the warpgroup executes
// the same instruction (.sync.aligned); .inc blocks until the SM's register file has room, so the
// sum over resident warpgroups must fit in 64K registers per SM; the kernel needs a register cap at
// entry (__launch_bounds__(threads, 1) or -maxrregcount) or ptxas ignores it (warning C7508).
template <uint32_t N>
__device__ __forceinline__ void setmaxnreg_inc() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: N must be in [24,256], multiple of 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// The release direction: lower the warpgroup's budget to N (frees registers for setmaxnreg_inc).
template <uint32_t N>
__device__ __forceinline__ void setmaxnreg_dec() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: N must be in [24,256], multiple of 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// ---------------------------------------------------------------------------------- diagnostics

// Stop the whole grid now: the host then sees cudaErrorLaunchFailure ("unspecified launch failure")
// at the next synchronisation, and the CUDA context is unusable afterwards. Inline, no call: safe
// inside a wgmma pipeline.
__device__ __forceinline__ void trap_now() {
    asm volatile("trap;");
}

// Print a message with the CTA and thread that hit it (visible on stdout after the failing
// synchronisation), then trap. printf is a real function call, and ptxas (CUDA 13.0) serialises
// EVERY wgmma of a kernel that contains a call anywhere, even on another warpgroup's branch
// ("C7510 ... wgmma pipeline crossing function boundary"): a large slowdown. So use it only in kernels
// without wgmma (or in debug builds); trap_now() is the production choice.
__device__ __noinline__ inline void trap_with_message(const char* what, uint32_t a, uint32_t b) {
    printf("[sm90 trap] %s (a=%u b=%u) block=(%d,%d,%d) thread=%d\n", what, a, b,
           (int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, (int)threadIdx.x);
    trap_now();
}

}  // namespace sm90
// ---- end common.cuh
// ---- begin mbarrier.cuh
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
// ---- end mbarrier.cuh
// ---- begin cluster.cuh
// cluster.cuh - thread-block-cluster helpers for sm_90a.
//
// A cluster is a group of up to 8 CTAs (16 with a non-portable opt-in) that are scheduled together on
// one GPC and can read, write and arrive on each other's shared memory (distributed shared memory).
// Launch with cudaLaunchKernelEx + cudaLaunchAttributeClusterDimension, or __cluster_dims__(x,y,z).


namespace sm90 {

// Rank of this CTA inside its cluster (0 .. cluster_size()-1), %cluster_ctarank.
__device__ __forceinline__ uint32_t cluster_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// Number of CTAs in the cluster, %cluster_nctarank.
__device__ __forceinline__ uint32_t cluster_size() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}

// Index of this cluster in the grid (x component), %clusterid.x.
__device__ __forceinline__ uint32_t cluster_id_x() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}

// Number of clusters in the grid (x component), %nclusterid.x.
__device__ __forceinline__ uint32_t cluster_count_x() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
    return r;
}

// barrier.cluster.arrive.release.aligned: this thread arrives at the cluster-wide barrier; release
// orders its earlier memory operations before the arrival. Every thread of every CTA in the cluster
// must arrive once per barrier phase (.aligned: all threads of a warp execute it together).
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

// Relaxed arrive: no memory ordering (cheaper when only execution needs to line up).
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

// barrier.cluster.wait.acquire.aligned: wait until every thread of the cluster arrived; acquire makes
// their released writes visible.
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Full cluster barrier (arrive then wait). Use it after mbarrier init (so peers may arrive on or
// multicast into this CTA's barriers) and before exit (so no peer still writes into a CTA that left).
__device__ __forceinline__ void cluster_sync() {
    cluster_arrive();
    cluster_wait();
}

// mapa.shared::cluster.u32: translate a local shared-memory address (32-bit .shared::cta) into the
// address of the same offset in CTA `cta_rank`'s shared memory, usable by ld/st/atom/mbarrier with the
// .shared::cluster state space.
__device__ __forceinline__ uint32_t mapa_shared(uint32_t local_smem_addr, uint32_t cta_rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local_smem_addr), "r"(cta_rank));
    return r;
}

// 32-bit store to another CTA's shared memory (address from mapa_shared).
__device__ __forceinline__ void st_shared_cluster_u32(uint32_t cluster_addr, uint32_t value) {
    asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(cluster_addr), "r"(value) : "memory");
}

// 32-bit load from another CTA's shared memory (address from mapa_shared).
__device__ __forceinline__ uint32_t ld_shared_cluster_u32(uint32_t cluster_addr) {
    uint32_t v;
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(cluster_addr) : "memory");
    return v;
}

}  // namespace sm90
// ---- end cluster.cuh
// ---- begin tma.cuh
// tma.cuh - Tensor Memory Accelerator (bulk tensor copies) for sm_90a, device side.
//
// A TMA copy moves one "box" of a 1-5 D tensor between global and shared memory, described by a
// 128-byte CUtensorMap made on the host (tma_host.cuh). Pass the map to the kernel as a
// `const __grid_constant__ CUtensorMap` parameter and take its address (&map) here: the map must sit
// in kernel-parameter, constant or global memory, never in a local copy.
//
// Coordinates are signed 32-bit element indices, innermost dimension first: {col, row} for a
// row-major matrix. Parts of the box outside the tensor are zero-filled on loads (and still count
// towards the transaction bytes) and dropped on stores.
//
// Loads complete on an mbarrier (complete_tx: the barrier's tx-count drops by the box bytes). Stores
// complete through bulk async-groups (commit_group / wait_group), like cp.async groups.
// Shared-memory destinations/sources must be 128-byte aligned (1024-byte aligned for the 128B
// swizzle, so that the swizzle pattern the TMA writes is the one wgmma expects).

#include <cuda.h>


namespace sm90 {

// -------------------------------------------------------------------------------- cache hints

// createpolicy.fractional: make a 64-bit L2 cache policy for the .L2::cache_hint forms below.
// evict_first suits data read once (streamed operands), evict_last data re-read by many CTAs soon.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ uint64_t l2_policy_evict_normal() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
    return p;
}

// prefetch.tensormap: pull the 128-byte tensor map into the TMA unit's descriptor cache, so the first
// copy does not wait for it. One thread, once per kernel, before the first copy that uses it.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// prefetch of a box into L2 only (no shared memory, no barrier): warms L2 for a later load.
__device__ __forceinline__ void tma_prefetch_2d(const CUtensorMap* map, int32_t c0, int32_t c1) {
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1) : "memory");
}

// -------------------------------------------------------------------------- loads (global->smem)
//
// cp.async.bulk.tensor.<N>d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
//     [dst], [map, {c0, ...}], [bar] {, ctaMask} {, policy}
// One thread issues; the box lands at `dst` in this CTA (the .shared::cluster destination with a
// local address means "my own CTA"), and `bar` (in the same CTA as dst) gets complete_tx(box bytes).
// The issuing thread (or another) must have called mbar_arrive_expect_tx(bar, bytes) for the phase.

#define SM90_TMA_MAP(map) "l"(reinterpret_cast<uint64_t>(map))

// N-d load, N = number of coordinates (2..5 here; 1-d works the same way).
template <typename... Coords>
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, Coords... c) {
    constexpr int N = sizeof...(Coords);
    static_assert(N >= 1 && N <= 5, "TMA tensors have 1 to 5 dimensions");
    const int32_t x[5] = {static_cast<int32_t>(c)..., };
    const uint32_t d = smem_u32(dst), b = smem_u32(bar);
    if constexpr (N == 1) {
        asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%3}], [%2];"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "r"(x[0]) : "memory");
    } else if constexpr (N == 2) {
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%3, %4}], [%2];"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "r"(x[0]), "r"(x[1]) : "memory");
    } else if constexpr (N == 3) {
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%3, %4, %5}], [%2];"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "r"(x[0]), "r"(x[1]), "r"(x[2]) : "memory");
    } else if constexpr (N == 4) {
        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%3, %4, %5, %6}], [%2];"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3])
                     : "memory");
    } else {
        asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]),
                     "r"(x[4]) : "memory");
    }
}

// Same with an L2 cache policy (from l2_policy_*): .L2::cache_hint, the policy is the last operand.
template <typename... Coords>
__device__ __forceinline__ void tma_load_hint(void* dst, const CUtensorMap* map, uint64_t* bar, uint64_t policy,
                                              Coords... c) {
    constexpr int N = sizeof...(Coords);
    static_assert(N >= 1 && N <= 5, "TMA tensors have 1 to 5 dimensions");
    const int32_t x[5] = {static_cast<int32_t>(c)..., };
    const uint32_t d = smem_u32(dst), b = smem_u32(bar);
    if constexpr (N == 1) {
        asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".L2::cache_hint [%0], [%1, {%4}], [%2], %3;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "l"(policy), "r"(x[0]) : "memory");
    } else if constexpr (N == 2) {
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".L2::cache_hint [%0], [%1, {%4, %5}], [%2], %3;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "l"(policy), "r"(x[0]), "r"(x[1]) : "memory");
    } else if constexpr (N == 3) {
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".L2::cache_hint [%0], [%1, {%4, %5, %6}], [%2], %3;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "l"(policy), "r"(x[0]), "r"(x[1]), "r"(x[2])
                     : "memory");
    } else if constexpr (N == 4) {
        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".L2::cache_hint [%0], [%1, {%4, %5, %6, %7}], [%2], %3;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "l"(policy), "r"(x[0]), "r"(x[1]), "r"(x[2]),
                     "r"(x[3]) : "memory");
    } else {
        asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".L2::cache_hint [%0], [%1, {%4, %5, %6, %7, %8}], [%2], %3;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "l"(policy), "r"(x[0]), "r"(x[1]), "r"(x[2]),
                     "r"(x[3]), "r"(x[4]) : "memory");
    }
}

// Multicast load (sm_90a): one global read, the box is written to the same shared-memory offset in
// every CTA of the cluster whose bit is set in `cta_mask` (bit i = cluster rank i), and each of those
// CTAs' mbarrier at the offset of `bar` gets complete_tx(box bytes). So every receiving CTA must
// expect those bytes on its own barrier, and the issuing CTA may only overwrite a stage after every
// receiver released it (empty barriers counted across the cluster).
template <typename... Coords>
__device__ __forceinline__ void tma_load_multicast(void* dst, const CUtensorMap* map, uint64_t* bar,
                                                   uint16_t cta_mask, Coords... c) {
    constexpr int N = sizeof...(Coords);
    static_assert(N >= 1 && N <= 5, "TMA tensors have 1 to 5 dimensions");
    const int32_t x[5] = {static_cast<int32_t>(c)..., };
    const uint32_t d = smem_u32(dst), b = smem_u32(bar);
    if constexpr (N == 1) {
        asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".multicast::cluster [%0], [%1, {%4}], [%2], %3;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "h"(cta_mask), "r"(x[0]) : "memory");
    } else if constexpr (N == 2) {
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".multicast::cluster [%0], [%1, {%4, %5}], [%2], %3;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "h"(cta_mask), "r"(x[0]), "r"(x[1]) : "memory");
    } else if constexpr (N == 3) {
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".multicast::cluster [%0], [%1, {%4, %5, %6}], [%2], %3;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "h"(cta_mask), "r"(x[0]), "r"(x[1]), "r"(x[2])
                     : "memory");
    } else if constexpr (N == 4) {
        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".multicast::cluster [%0], [%1, {%4, %5, %6, %7}], [%2], %3;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "h"(cta_mask), "r"(x[0]), "r"(x[1]), "r"(x[2]),
                     "r"(x[3]) : "memory");
    } else {
        asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".multicast::cluster [%0], [%1, {%4, %5, %6, %7, %8}], [%2], %3;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "h"(cta_mask), "r"(x[0]), "r"(x[1]), "r"(x[2]),
                     "r"(x[3]), "r"(x[4]) : "memory");
    }
}

// Multicast load with an L2 cache policy: operands ..., [bar], ctaMask, policy.
template <typename... Coords>
__device__ __forceinline__ void tma_load_multicast_hint(void* dst, const CUtensorMap* map, uint64_t* bar,
                                                        uint16_t cta_mask, uint64_t policy, Coords... c) {
    constexpr int N = sizeof...(Coords);
    static_assert(N >= 2 && N <= 5, "this wrapper covers 2 to 5 dimensions");
    const int32_t x[5] = {static_cast<int32_t>(c)..., };
    const uint32_t d = smem_u32(dst), b = smem_u32(bar);
    if constexpr (N == 2) {
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".multicast::cluster.L2::cache_hint [%0], [%1, {%5, %6}], [%2], %3, %4;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "h"(cta_mask), "l"(policy), "r"(x[0]), "r"(x[1])
                     : "memory");
    } else if constexpr (N == 3) {
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".multicast::cluster.L2::cache_hint [%0], [%1, {%5, %6, %7}], [%2], %3, %4;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "h"(cta_mask), "l"(policy), "r"(x[0]), "r"(x[1]),
                     "r"(x[2]) : "memory");
    } else if constexpr (N == 4) {
        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".multicast::cluster.L2::cache_hint [%0], [%1, {%5, %6, %7, %8}], [%2], %3, %4;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "h"(cta_mask), "l"(policy), "r"(x[0]), "r"(x[1]),
                     "r"(x[2]), "r"(x[3]) : "memory");
    } else {
        asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".multicast::cluster.L2::cache_hint [%0], [%1, {%5, %6, %7, %8, %9}], [%2], %3, %4;"
                     ::"r"(d), SM90_TMA_MAP(map), "r"(b), "h"(cta_mask), "l"(policy), "r"(x[0]), "r"(x[1]),
                     "r"(x[2]), "r"(x[3]), "r"(x[4]) : "memory");
    }
}

// ------------------------------------------------------------------------- stores (smem->global)
//
// cp.async.bulk.tensor.<N>d.global.shared::cta.tile.bulk_group [map, {c0, ...}], [src]
// One thread issues. Before it, every thread that wrote the smem box must have executed
// fence_proxy_async_shared() and then synchronised with the issuing thread (named barrier or
// __syncthreads). Group the stores with tma_store_commit(); before the smem box is written again,
// wait with tma_store_wait_read<k>() (source read done); before the kernel exits or another kernel
// reads the output, tma_store_wait<0>() (writes done).

// N-d store of the smem box at `src` to the box at coordinates {c0, ...} (clipped at tensor edges).
template <typename... Coords>
__device__ __forceinline__ void tma_store(const CUtensorMap* map, const void* src, Coords... c) {
    constexpr int N = sizeof...(Coords);
    static_assert(N >= 1 && N <= 5, "TMA tensors have 1 to 5 dimensions");
    const int32_t x[5] = {static_cast<int32_t>(c)..., };
    const uint32_t s = smem_u32(src);
    if constexpr (N == 1) {
        asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group [%0, {%2}], [%1];"
                     ::SM90_TMA_MAP(map), "r"(s), "r"(x[0]) : "memory");
    } else if constexpr (N == 2) {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];"
                     ::SM90_TMA_MAP(map), "r"(s), "r"(x[0]), "r"(x[1]) : "memory");
    } else if constexpr (N == 3) {
        asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];"
                     ::SM90_TMA_MAP(map), "r"(s), "r"(x[0]), "r"(x[1]), "r"(x[2]) : "memory");
    } else if constexpr (N == 4) {
        asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
                     ::SM90_TMA_MAP(map), "r"(s), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]) : "memory");
    } else {
        asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group"
                     " [%0, {%2, %3, %4, %5, %6}], [%1];"
                     ::SM90_TMA_MAP(map), "r"(s), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(x[4])
                     : "memory");
    }
}

// Reduction store: global[box] += smem box (element type from the map, e.g. bf16 or f32), 2-d.
// Shows in SASS as UTMAREDG.
__device__ __forceinline__ void tma_store_add_2d(const CUtensorMap* map, const void* src, int32_t c0, int32_t c1) {
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];"
                 ::SM90_TMA_MAP(map), "r"(smem_u32(src)), "r"(c0), "r"(c1) : "memory");
}

// cp.async.bulk.commit_group: close the current group of bulk stores issued by this thread.
__device__ __forceinline__ void tma_store_commit() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// cp.async.bulk.wait_group.read N: wait until at most N of this thread's committed groups still have
// to READ their shared-memory source (their smem may then be overwritten; the global writes may
// still be in flight).
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// cp.async.bulk.wait_group N: wait until at most N groups are pending in full (writes performed).
template <int N>
__device__ __forceinline__ void tma_store_wait() {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// ------------------------------------------------------------------ non-tensor bulk copies (1-D)

// cp.async.bulk global->shared: `bytes` contiguous bytes (multiple of 16; both addresses 16-byte
// aligned), completion on `bar` as for tensor loads.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}

// cp.async.bulk shared->global, completion through bulk groups (tma_store_commit / wait).
__device__ __forceinline__ void bulk_store(void* dst, const void* src, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 ::"l"(dst), "r"(smem_u32(src)), "r"(bytes) : "memory");
}

#undef SM90_TMA_MAP

}  // namespace sm90
// ---- end tma.cuh
// ---- begin tma_host.cuh
// tma_host.cuh - host-side creation of TMA tensor maps (CUtensorMap) for bf16 tensors.
//
// cuTensorMapEncodeTiled is a driver-API function. To avoid linking libcuda directly (-lcuda), the
// helper fetches it once through the runtime (cudaGetDriverEntryPointByVersion), which works with
// the static or shared cudart alike.
//
// Rules the encoder enforces (and that these helpers check first, with a readable message):
//  * rank 1..5; dims[0] is the innermost (contiguous) dimension; every dim in [1, 2^32];
//  * the global address is 16-byte aligned; strides (bytes, for dims 1..rank-1) are multiples of 16
//    and below 2^40;
//  * each box dim is in [1, 256]; with a swizzle mode, box[0] * sizeof(elem) must not exceed the
//    swizzle span (32, 64 or 128 bytes) - e.g. 64 bf16 for the 128B swizzle;
//  * the smem side then holds the box densely, innermost dim fastest, with the swizzle applied to
//    16-byte chunks inside each span-sized row (see contract.md for the exact pattern).

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace sm90 {

enum class Swizzle { kNone, k32B, k64B, k128B };

// Bytes of one swizzle row (the "span"): 0 means no limit beyond the box rules.
inline uint32_t swizzle_span_bytes(Swizzle s) {
    switch (s) {
        case Swizzle::k32B: return 32;
        case Swizzle::k64B: return 64;
        case Swizzle::k128B: return 128;
        default: return 0;
    }
}

inline CUtensorMapSwizzle to_cu_swizzle(Swizzle s) {
    switch (s) {
        case Swizzle::k32B: return CU_TENSOR_MAP_SWIZZLE_32B;
        case Swizzle::k64B: return CU_TENSOR_MAP_SWIZZLE_64B;
        case Swizzle::k128B: return CU_TENSOR_MAP_SWIZZLE_128B;
        default: return CU_TENSOR_MAP_SWIZZLE_NONE;
    }
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled, looked up once per process (nullptr if the driver lacks it).
inline EncodeTiledFn encode_tiled_fn() {
    static EncodeTiledFn fn = []() -> EncodeTiledFn {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) !=
                cudaSuccess || q != cudaDriverEntryPointSuccess) {
            return nullptr;
        }
        return reinterpret_cast<EncodeTiledFn>(p);
    }();
    return fn;
}

// Encode a tiled bf16 tensor map of rank 1..5.
//   dims[i]        extent of dim i in elements, dims[0] innermost;
//   strides[i]     byte stride of dim i+1 (rank-1 entries; dim 0 is contiguous);
//   box[i]         box extent in elements for dim i.
// Returns "" on success, otherwise what is wrong (nothing is thrown).
inline std::string make_tensor_map_bf16(CUtensorMap* out, const void* base, uint32_t rank, const uint64_t* dims,
                                        const uint64_t* strides, const uint32_t* box, Swizzle swizzle,
                                        CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
    if (rank < 1 || rank > 5) return "tensor map rank must be 1..5, got " + std::to_string(rank);
    if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return "tensor map base address is not 16-byte aligned";
    for (uint32_t i = 0; i < rank; ++i) {
        if (dims[i] < 1 || dims[i] > (1ull << 32)) return "dim " + std::to_string(i) + " out of [1, 2^32]";
        if (box[i] < 1 || box[i] > 256) return "box dim " + std::to_string(i) + " out of [1, 256]";
        if (i + 1 < rank && (strides[i] % 16 != 0 || strides[i] >= (1ull << 40)))
            return "stride of dim " + std::to_string(i + 1) + " must be a multiple of 16 below 2^40";
    }
    const uint32_t span = swizzle_span_bytes(swizzle);
    if (span != 0 && box[0] * 2u > span)
        return "box[0] = " + std::to_string(box[0]) + " bf16 is wider than the " + std::to_string(span) +
               "-byte swizzle span";
    if ((box[0] * 2u) % 16 != 0) return "box[0] * 2 bytes must be a multiple of 16";
    EncodeTiledFn fn = encode_tiled_fn();
    if (fn == nullptr) return "cuTensorMapEncodeTiled is not available from the driver";
    cuuint64_t d[5], s[5];
    cuuint32_t b[5], e[5];
    for (uint32_t i = 0; i < rank; ++i) {
        d[i] = dims[i];
        b[i] = box[i];
        e[i] = 1;  // element strides: take every element of the box
        if (i + 1 < rank) s[i] = strides[i];
    }
    const CUresult r = fn(out, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), d, s, b, e,
                          CU_TENSOR_MAP_INTERLEAVE_NONE, to_cu_swizzle(swizzle), promo,
                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(r));
    return "";
}

// Row-major [rows, cols] bf16 matrix with a row pitch of `ld` elements; the box is box_rows x box_cols
// (box_cols along the contiguous dim). Coordinates in the kernel are then {col, row}.
inline std::string make_tensor_map_bf16_2d(CUtensorMap* out, const void* base, uint64_t rows, uint64_t cols,
                                           uint64_t ld, uint32_t box_rows, uint32_t box_cols, Swizzle swizzle) {
    const uint64_t dims[2] = {cols, rows};
    const uint64_t strides[1] = {ld * 2};
    const uint32_t box[2] = {box_cols, box_rows};
    return make_tensor_map_bf16(out, base, 2, dims, strides, box, swizzle);
}

}  // namespace sm90
// ---- end tma_host.cuh
// ---- begin wgmma.cuh
// wgmma.cuh - warpgroup-level asynchronous MMA (wgmma) for bf16 inputs, fp32 accumulators, sm_90a.
//
// wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 computes D[64 x N] (+)= A[64 x 16] * B[16 x N]
// for one warpgroup (4 consecutive warps, the first warp index divisible by 4, all 128 threads
// executing it together). A comes from shared memory (SS form, through a 64-bit matrix descriptor)
// or from registers (RS form, 4 x b32 per thread); B always comes from shared memory. D lives in
// N/2 fp32 registers per thread (layout: acc_row / acc_col below). N is a multiple of 8 up to 256;
// this header instantiates N = 64, 128, 256.
//
// The instruction is asynchronous. The required order per batch of MMAs is
//   wgmma_fence();                       // registers (D, and A in RS form) are ready to be read
//   wgmma_ss<N>(...) x k;                // issue; successive MMAs on the same D chain in hardware
//   wgmma_commit();                      // close a wgmma-group
//   wgmma_wait<G>();                     // until at most G groups are still running
// Until the wait that covers an MMA: do not read or write its D registers, do not change its A
// registers (RS), and do not overwrite the shared memory it reads. Shared memory written by ordinary
// stores must be fenced with fence_proxy_async_shared() before the MMA reads it (TMA-written data is
// already in the async proxy).


namespace sm90 {

// ------------------------------------------------------------------------------- fences, groups

// wgmma.fence.sync.aligned: orders this warpgroup's earlier register accesses (to accumulators and
// A fragments) before the following wgmma.mma_async. Needed before the first MMA of a batch and
// whenever those registers were touched since the last MMA.
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

// wgmma.commit_group.sync.aligned: all MMAs issued since the previous commit form one group.
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// wgmma.wait_group.sync.aligned N: wait until at most N committed groups of this warpgroup are pending.
// After wgmma_wait<0>() every accumulator is final and the operand smem may be reused.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Tell the compiler an accumulator array is being written asynchronously (keeps it from moving
// reads/writes of these registers across the fence/wait points).
template <int R>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---------------------------------------------------------------- shared-memory matrix descriptor
//
// 64-bit descriptor of one operand tile in shared memory:
//   bits  0-13  start address >> 4          (the tile's first byte; 16-byte aligned)
//   bits 16-29  leading-dimension byte offset (LBO) >> 4
//   bits 32-45  stride-dimension byte offset  (SBO) >> 4
//   bits 49-51  base offset (0 when the swizzle atoms start 1024/512/256-byte aligned, as here)
//   bits 62-63  swizzle: 0 none, 1 128B, 2 64B, 3 32B
// The tile is built of "core matrices" of 8 rows x 16 bytes (8 x 8 bf16). For a K-major operand
// (rows are M or N, the 16-byte chunks run along K): SBO = bytes between core matrices adjacent in
// M/N (the next 8 rows), LBO = bytes between core matrices adjacent in K. With a swizzle, rows are
// `span` bytes wide (32/64/128) and hold span/16 K-chunks; LBO is then not used for K-major tiles
// (set it to 1), and SBO = 8 * span (one 8-row swizzle atom).

enum class SmemSwizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

// Pack the fields above (byte offsets are given in bytes and stored >> 4).
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                   SmemSwizzle swizzle) {
    uint64_t d = 0;
    d |= static_cast<uint64_t>((smem_addr >> 4) & 0x3FFF);
    d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
    d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
    d |= static_cast<uint64_t>(static_cast<uint32_t>(swizzle)) << 62;
    return d;
}

// K-major bf16 tile written by TMA with the matching swizzle, rows of exactly one span:
//   128B: box {64, rows}  -> K-steps of 16 at +32 bytes: desc(k) = kmajor_desc(base + 32 * k)
//   64B : box {32, rows}  -> K-steps at +32 bytes (2 per row)
//   32B : box {16, rows}  -> one K-step per row
// `tile_addr` must point to the first row of an 8-row atom (atoms are 8 * span bytes, and for the
// swizzled modes the tile base must be aligned to 8 * span; 1024 bytes covers all three).
template <SmemSwizzle kSw>
__device__ __forceinline__ uint64_t kmajor_desc(uint32_t tile_addr) {
    static_assert(kSw != SmemSwizzle::kNone, "use make_smem_desc with explicit LBO/SBO for no swizzle");
    constexpr uint32_t span = kSw == SmemSwizzle::k128B ? 128 : (kSw == SmemSwizzle::k64B ? 64 : 32);
    return make_smem_desc(tile_addr, 16, 8 * span, kSw);
}

// Moving a descriptor along K inside a swizzled row: add bytes>>4 to the start-address field (the
// hardware applies the swizzle to the final address, so this is exact as long as it stays inside the
// row). Example: the k-th 16-wide slice of a 128B-swizzled bf16 tile is desc + 2 * k.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
    return desc + static_cast<uint64_t>(bytes >> 4);
}

// --------------------------------------------------------------------------- accumulator layout
//
// For m64nN with fp32 D, thread t of the warpgroup (warp w = t / 32, lane l = t % 32) holds N/2 values
// d[i]. Element d[i] sits at
//   row = 16 * w + l / 4 + 8 * ((i / 2) % 2)
//   col = 8 * (i / 4) + 2 * (l % 4) + (i % 2)
// i.e. per 8-column block j = i / 4: d[4j], d[4j+1] are row r, cols c, c+1 and d[4j+2], d[4j+3] are
// row r+8, the same cols. This is the m16n8 mma C layout repeated over N/8 blocks, and exactly the
// fragment an stmatrix .x4 (see matrix.cuh) takes for a 16 x 16 piece: registers
// {pack(d[4j], d[4j+1]), pack(d[4j+2], d[4j+3]), pack(d[4j+4], d[4j+5]), pack(d[4j+6], d[4j+7])}.
__device__ __forceinline__ int acc_row(int i, int thread_in_wg) {
    return 16 * (thread_in_wg / 32) + (thread_in_wg % 32) / 4 + 8 * ((i / 2) % 2);
}
__device__ __forceinline__ int acc_col(int i, int thread_in_wg) {
    return 8 * (i / 4) + 2 * (thread_in_wg % 4) + (i % 2);
}

// Register-A fragment (RS form) of a 64 x 16 bf16 A slice, per thread (w, l as above), 4 x b32 each
// holding 2 bf16 (lower k in the low half):
//   a[0]: row 16w + l/4,     k = 2(l%4), +1        a[1]: row 16w + l/4 + 8, same k
//   a[2]: row 16w + l/4,     k = 8 + 2(l%4), +1    a[3]: row 16w + l/4 + 8, same k
// which is what ldmatrix .x4 returns for the four 8x8 blocks (rows 0-7|8-15) x (k 0-7|8-15) when lanes
// 0-7, 8-15, 16-23, 24-31 give the row addresses of blocks (r0-7,k0-7), (r8-15,k0-7), (r0-7,k8-15),
// (r8-15,k8-15). An fp32 accumulator of one MMA converts to the A fragment of the next (FlashAttention
// P = softmax(S)): a[0] = pack(d[8j], d[8j+1]), a[1] = pack(d[8j+2], d[8j+3]), a[2] = pack(d[8j+4], d[8j+5]),
// a[3] = pack(d[8j+6], d[8j+7]) for the k-slice 16j..16j+15.

// ------------------------------------------------------------------------------- the MMAs
//
// wgmma_ss<N>(d, descA, descB, scale_d): D = A*B + (scale_d ? D : 0), A and B from shared memory.
// wgmma_rs<N>(d, a, descB, scale_d):     the same with A from registers.
// kTransA / kTransB = 0 means K-major operands (A rows along M with K contiguous; B rows along N
// with K contiguous, i.e. C = A * B^T for row-major A[M,K], B[N,K]); 1 means MN-major (transposed,
// allowed for 16-bit types only).

#define SM90_ACC8(i) "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                     "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

template <int N, int kTransA, int kTransB>
struct WgmmaSS;
template <int N, int kTransB>
struct WgmmaRS;

template <int kTransA, int kTransB>
struct WgmmaSS<64, kTransA, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[32], uint64_t da, uint64_t db, uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31 "
        "}, %32, %33, p, 1, 1, %35, %36;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24)
        : "l"(da), "l"(db), "r"(scale_d), "n"(kTransA), "n"(kTransB));
    }
};

template <int kTransB>
struct WgmmaRS<64, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                               uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %37, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31 "
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
    }
};

template <int kTransA, int kTransB>
struct WgmmaSS<128, kTransA, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[64], uint64_t da, uint64_t db, uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "
        "}, %64, %65, p, 1, 1, %67, %68;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24), SM90_ACC8(32), SM90_ACC8(40), SM90_ACC8(48), SM90_ACC8(56)
        : "l"(da), "l"(db), "r"(scale_d), "n"(kTransA), "n"(kTransB));
    }
};

template <int kTransB>
struct WgmmaRS<128, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                               uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %69, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24), SM90_ACC8(32), SM90_ACC8(40), SM90_ACC8(48), SM90_ACC8(56)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
    }
};

template <int kTransA, int kTransB>
struct WgmmaSS<256, kTransA, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[128], uint64_t da, uint64_t db, uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %130, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127 "
        "}, %128, %129, p, 1, 1, %131, %132;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24), SM90_ACC8(32), SM90_ACC8(40), SM90_ACC8(48), SM90_ACC8(56), SM90_ACC8(64), SM90_ACC8(72), SM90_ACC8(80), SM90_ACC8(88), SM90_ACC8(96), SM90_ACC8(104), SM90_ACC8(112), SM90_ACC8(120)
        : "l"(da), "l"(db), "r"(scale_d), "n"(kTransA), "n"(kTransB));
    }
};

template <int kTransB>
struct WgmmaRS<256, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[128], const uint32_t (&a)[4], uint64_t db,
                                               uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %133, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127 "
        "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24), SM90_ACC8(32), SM90_ACC8(40), SM90_ACC8(48), SM90_ACC8(56), SM90_ACC8(64), SM90_ACC8(72), SM90_ACC8(80), SM90_ACC8(88), SM90_ACC8(96), SM90_ACC8(104), SM90_ACC8(112), SM90_ACC8(120)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
    }
};

#undef SM90_ACC8

// D[64 x N] = A(smem) * B(smem) + (scale_d ? D : 0); N in {64, 128, 256}.
template <int N, int kTransA = 0, int kTransB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d) {
    WgmmaSS<N, kTransA, kTransB>::run(d, desc_a, desc_b, scale_d ? 1u : 0u);
}

// D[64 x N] = A(registers, 4 x b32 per thread) * B(smem) + (scale_d ? D : 0).
template <int N, int kTransB = 0>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, bool scale_d) {
    WgmmaRS<N, kTransB>::run(d, a, desc_b, scale_d ? 1u : 0u);
}

}  // namespace sm90
// ---- end wgmma.cuh
// ---- begin matrix.cuh
// matrix.cuh - warp-wide 8x8 matrix loads/stores between registers and shared memory (ldmatrix,
// stmatrix; stmatrix is new in sm_90).
//
// Both move 1, 2 or 4 matrices of 8 rows x 8 b16 elements (16 bytes per row). Fragment layout: for
// matrix m, lane l holds one 32-bit register with the elements (row l / 4, cols 2 * (l % 4), +1), low
// half = lower column. Row addresses: lanes 8m .. 8m+7 give the shared-memory addresses of rows 0..7
// of matrix m (each 16-byte aligned; rows may be anywhere, so a swizzled layout is just a different
// address per lane). With .x1 / .x2 only lanes 0-7 / 0-15 supply addresses (the others are ignored
// but must still execute). .trans transposes each 8x8 matrix on the way.
// All 32 lanes execute the instruction together (.sync.aligned).


namespace sm90 {

// ldmatrix .x1 / .x2 / .x4 (no transpose).
__device__ __forceinline__ uint32_t ldmatrix_x1(uint32_t row_addr) {
    uint32_t r;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r) : "r"(row_addr) : "memory");
    return r;
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t row_addr, uint32_t& r0, uint32_t& r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r0), "=r"(r1) : "r"(row_addr) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t row_addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row_addr) : "memory");
}
// ldmatrix .x4 .trans: each thread receives (row 2(l%4), +1 ; col l/4) of the stored matrix, i.e. the
// fragment of the transpose (loads an MN-major tile as a K-major fragment).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t row_addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row_addr) : "memory");
}

// stmatrix .x1 / .x2 / .x4: the reverse direction (registers -> shared memory). The usual use is the
// GEMM/attention epilogue: convert fp32 accumulators to bf16 pairs (pack_bf16x2) and store a 16 x 16
// piece per instruction into a (swizzled) staging tile that a TMA store then writes to global memory.
// Those are generic-proxy writes: fence_proxy_async_shared() + a barrier before the TMA store.
__device__ __forceinline__ void stmatrix_x1(uint32_t row_addr, uint32_t r0) {
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};" ::"r"(row_addr), "r"(r0) : "memory");
}
__device__ __forceinline__ void stmatrix_x2(uint32_t row_addr, uint32_t r0, uint32_t r1) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};"
                 ::"r"(row_addr), "r"(r0), "r"(r1) : "memory");
}
__device__ __forceinline__ void stmatrix_x4(uint32_t row_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(row_addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t row_addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(row_addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// Byte offset of the 16-byte chunk (row, chunk) inside a tile whose rows are 128 bytes wide and that
// uses the 128B swizzle the TMA applies (CU_TENSOR_MAP_SWIZZLE_128B; tile base 1024-byte aligned):
// the chunk index is XORed with row % 8. 64B and 32B swizzles XOR with (row / 2) % 4 and (row / 4) % 2
// over rows of 64 / 32 bytes.
__device__ __forceinline__ uint32_t swizzle128_offset(uint32_t row, uint32_t chunk16) {
    return row * 128u + ((chunk16 ^ (row & 7u)) << 4);
}
__device__ __forceinline__ uint32_t swizzle64_offset(uint32_t row, uint32_t chunk16) {
    return row * 64u + ((chunk16 ^ ((row >> 1) & 3u)) << 4);
}
__device__ __forceinline__ uint32_t swizzle32_offset(uint32_t row, uint32_t chunk16) {
    return row * 32u + ((chunk16 ^ ((row >> 2) & 1u)) << 4);
}

}  // namespace sm90
// ---- end matrix.cuh
// ---- end sm90a.cuh

#ifndef GEMM_STAGES
#define GEMM_STAGES 4
#endif
#ifndef GEMM_CLUSTER
#define GEMM_CLUSTER 2
#endif
#ifndef GEMM_GROUP_ROWS
#define GEMM_GROUP_ROWS 2048
#endif

namespace gemm {

using namespace sm90;

constexpr int kBM = 128;            // CTA tile rows (M)
constexpr int kBN = 256;            // CTA tile cols (N)
constexpr int kBK = 64;             // K per stage: 64 bf16 = one 128-byte swizzle row
constexpr int kConsumers = 2;       // consumer warpgroups, 64 rows each
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kStages = GEMM_STAGES;
constexpr int kCluster = GEMM_CLUSTER;
constexpr int kGroupRows = GEMM_GROUP_ROWS;

constexpr uint32_t kATileBytes = kBM * kBK * 2;                   // 16 KB
constexpr uint32_t kBTileBytes = kBN * kBK * 2;                   // 32 KB
constexpr uint32_t kStageBytes = kATileBytes + kBTileBytes;       // bytes the full barrier expects
constexpr uint32_t kCChunkBytes = 64 * 64 * 2;                    // one 64x64 bf16 staging tile
constexpr uint32_t kCBytes = kConsumers * 2 * kCChunkBytes;       // double-buffered per consumer
constexpr uint32_t kBarOffset = kStages * kStageBytes + kCBytes;  // mbarriers after the tiles
constexpr uint32_t kSmemBytes = kBarOffset + 2 * kStages * 8 + 1024;  // +1024 for manual alignment
static_assert(kSmemBytes <= 232448, "shared memory per block on sm_90 is at most 227 KB");
static_assert(kCluster == 1 || kCluster == 2, "cluster size 1 or 2");
static_assert((kBN / kCluster) % 8 == 0, "multicast slice must keep 1024-byte atom alignment");

// Which tile a cluster works on: cluster tiles are kCluster*kBM rows x kBN cols, walked in groups of
// `group` cluster-rows so that consecutive indices stay inside a band of A rows (L2 reuse).
struct TileCoord {
    int m_blk;  // CTA tile row index (already includes this CTA's rank in the cluster)
    int n_blk;
};

__device__ __forceinline__ TileCoord tile_of(int ct, int m_ctiles, int n_tiles, int group, uint32_t rank) {
    const int per_group = group * n_tiles;
    const int first = (ct / per_group) * group;
    const int rows = min(group, m_ctiles - first);
    const int local = ct % per_group;
    TileCoord t;
    t.m_blk = (first + local % rows) * kCluster + static_cast<int>(rank);
    t.n_blk = local / rows;
    return t;
}

// One consumer warp signals that it is done reading stage `s`: one arrival on that stage's empty
// barrier in every CTA of the cluster (lane r arrives on CTA r's barrier).
__device__ __forceinline__ void release_stage(uint64_t* empty, uint32_t lane) {
    if constexpr (kCluster == 1) {
        if (lane == 0) mbar_arrive(empty);
    } else {
        if (lane < kCluster) mbar_arrive_cluster(empty, lane);
    }
}

// Write this consumer's 64 x 256 accumulator block to C through two 64x64 staging tiles.
__device__ __forceinline__ void epilogue(float (&acc)[128], uint8_t* cbuf, const CUtensorMap* tmC, int row0,
                                         int col0, int cw, uint32_t tid) {
    const uint32_t warp = tid / 32, lane = tid % 32;
    const uint32_t mi = lane / 8;                                // which 8x8 matrix this lane addresses
    const uint32_t row = 16 * warp + (mi % 2) * 8 + lane % 8;    // row inside the 64-row block
#pragma unroll
    for (int c = 0; c < 4; ++c) {                                // 64-column chunks
        uint8_t* buf = cbuf + (c % 2) * kCChunkBytes;
        if (tid == 0) tma_store_wait_read<1>();                  // the store that used `buf` has read it
        named_barrier_sync(1 + cw, 128);
        const uint32_t base = smem_u32(buf);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {                         // 16-column pieces
            const int j = 8 * c + 2 * jj;                        // 8-column accumulator block
            const uint32_t addr = base + swizzle128_offset(row, 2 * jj + mi / 2);
            stmatrix_x4(addr, pack_bf16x2(acc[4 * j + 0], acc[4 * j + 1]), pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]),
                        pack_bf16x2(acc[4 * j + 4], acc[4 * j + 5]), pack_bf16x2(acc[4 * j + 6], acc[4 * j + 7]));
        }
        fence_proxy_async_shared();                              // generic writes -> async-proxy reader
        named_barrier_sync(1 + cw, 128);
        if (tid == 0) {
            tma_store(tmC, buf, col0 + 64 * c, row0);
            tma_store_commit();
        }
    }
}

__global__ void __launch_bounds__(kThreads, 1)
gemm_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
            const __grid_constant__ CUtensorMap tmC, int M, int N, int K) {
    extern __shared__ uint8_t smem_raw[];
    // 128B-swizzled TMA tiles and wgmma atoms need 1024-byte alignment.
    uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    uint8_t* a_tiles = smem;                                     // [kStages][128 x 64] bf16
    uint8_t* b_tiles = smem + kStages * kATileBytes;             // [kStages][256 x 64] bf16
    uint8_t* c_tiles = smem + kStages * kStageBytes;             // [kConsumers][2][64 x 64] bf16
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOffset);
    uint64_t* empty = full + kStages;

    const uint32_t wg = warpgroup_id();
    const uint32_t rank = kCluster > 1 ? cluster_ctarank() : 0;
    const int m_tiles = (M + kBM - 1) / kBM;
    const int n_tiles = (N + kBN - 1) / kBN;
    const int m_ctiles = (m_tiles + kCluster - 1) / kCluster;
    const int num_ctiles = m_ctiles * n_tiles;
    const int group = max(1, kGroupRows / (kBM * kCluster));
    const int k_iters = (K + kBK - 1) / kBK;
    const int cluster_idx = blockIdx.x / kCluster;
    const int num_clusters = gridDim.x / kCluster;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbar_init(&full[s], 1);                              // the producer's arrive.expect_tx
            mbar_init(&empty[s], 4 * kConsumers * kCluster);     // every consumer warp of every CTA
        }
        fence_mbarrier_init();
        tma_prefetch_descriptor(&tmA);
        tma_prefetch_descriptor(&tmB);
        tma_prefetch_descriptor(&tmC);
    }
    __syncthreads();
    if constexpr (kCluster > 1) cluster_sync();                  // peers may now signal our barriers

    if (wg == 0) {
        // ------------------------------------------------------------------ producer warpgroup
        setmaxnreg_dec<40>();
        if (warp_id() == 0 && elect_one_sync()) {
            int stage = 0;
            uint32_t phase = 0;
            for (int ct = cluster_idx; ct < num_ctiles; ct += num_clusters) {
                const TileCoord t = tile_of(ct, m_ctiles, n_tiles, group, rank);
                for (int kb = 0; kb < k_iters; ++kb) {
                    mbar_wait(&empty[stage], phase ^ 1);
                    mbar_arrive_expect_tx(&full[stage], kStageBytes);
                    tma_load(a_tiles + stage * kATileBytes, &tmA, &full[stage], kb * kBK, t.m_blk * kBM);
                    uint8_t* b_dst = b_tiles + stage * kBTileBytes;
                    if constexpr (kCluster == 1) {
                        tma_load(b_dst, &tmB, &full[stage], kb * kBK, t.n_blk * kBN);
                    } else {
                        constexpr int kSlice = kBN / kCluster;   // B rows this CTA fetches for both
                        tma_load_multicast(b_dst + rank * kSlice * kBK * 2, &tmB, &full[stage],
                                           static_cast<uint16_t>((1u << kCluster) - 1), kb * kBK,
                                           t.n_blk * kBN + static_cast<int>(rank) * kSlice);
                    }
                    if (++stage == kStages) { stage = 0; phase ^= 1; }
                }
            }
        }
        __syncwarp();                                            // reconverge warp 0 (aligned barriers follow)
    } else {
        // ------------------------------------------------------------------ consumer warpgroups
        setmaxnreg_inc<232>();
        const int cw = static_cast<int>(wg) - 1;                 // 0 or 1: rows 64*cw .. 64*cw+63
        const uint32_t tid = threadIdx.x % 128;
        const uint32_t lane = tid % 32;
        uint8_t* cbuf = c_tiles + cw * 2 * kCChunkBytes;
        float acc[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.f;
        int stage = 0;
        uint32_t phase = 0;
        for (int ct = cluster_idx; ct < num_ctiles; ct += num_clusters) {
            const TileCoord t = tile_of(ct, m_ctiles, n_tiles, group, rank);
            int prev = -1;
            for (int kb = 0; kb < k_iters; ++kb) {
                mbar_wait(&full[stage], phase);
                const uint32_t a_addr = smem_u32(a_tiles + stage * kATileBytes) + cw * 64 * 128;
                const uint32_t b_addr = smem_u32(b_tiles + stage * kBTileBytes);
                const uint64_t da = kmajor_desc<SmemSwizzle::k128B>(a_addr);
                const uint64_t db = kmajor_desc<SmemSwizzle::k128B>(b_addr);
                wgmma_fence();
#pragma unroll
                for (int k = 0; k < kBK / 16; ++k) {
                    wgmma_ss<256>(acc, desc_advance(da, 32 * k), desc_advance(db, 32 * k), kb > 0 || k > 0);
                }
                wgmma_commit();
                wgmma_wait<1>();                                 // the previous stage's MMAs are done
                if (prev >= 0) release_stage(&empty[prev], lane);
                prev = stage;
                if (++stage == kStages) { stage = 0; phase ^= 1; }
            }
            wgmma_wait<0>();
            wgmma_fence_operands(acc);                           // accumulators final from here on
            if (prev >= 0) release_stage(&empty[prev], lane);
            epilogue(acc, cbuf, &tmC, t.m_blk * kBM + cw * 64, t.n_blk * kBN, cw, tid);
        }
        if (tid == 0) tma_store_wait<0>();                       // C fully written before exit
        __syncwarp();
    }
    if constexpr (kCluster > 1) cluster_sync();                  // no CTA leaves while a peer may signal it
}

// ------------------------------------------------------------------------------------- host side

int device_sm_count(int dev) {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n;
}

// Number of CTAs to launch: one per SM (per cluster slot when clustered), never more than the tiles.
int grid_size(int dev, int num_ctiles) {
    static int cached_dev = -1, cached_slots = 0;
    if (cached_dev != dev) {
        cudaFuncSetAttribute(gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        int slots = device_sm_count(dev) / kCluster;
        if constexpr (kCluster > 1) {
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeClusterDimension;
            attr[0].val.clusterDim.x = kCluster;
            attr[0].val.clusterDim.y = 1;
            attr[0].val.clusterDim.z = 1;
            cfg.gridDim = dim3(kCluster * slots, 1, 1);
            cfg.blockDim = dim3(kThreads, 1, 1);
            cfg.dynamicSmemBytes = kSmemBytes;
            cfg.attrs = attr;
            cfg.numAttrs = 1;
            int clusters = 0;
            if (cudaOccupancyMaxActiveClusters(&clusters, gemm_kernel, &cfg) == cudaSuccess && clusters > 0) {
                slots = clusters;
            }
        }
        cached_slots = slots;
        cached_dev = dev;
    }
    return kCluster * (num_ctiles < cached_slots ? num_ctiles : cached_slots);
}

void check_operand(const tvm::ffi::TensorView& t, const char* name) {
    const DLDataType dt = t.dtype();
    if (t.ndim() != 2) TVM_FFI_THROW(ValueError) << name << " must be 2-D, got " << t.ndim() << " dims";
    if (dt.code != kDLBfloat || dt.bits != 16 || dt.lanes != 1) TVM_FFI_THROW(TypeError) << name << " must be bfloat16";
    if (t.device().device_type != kDLCUDA) TVM_FFI_THROW(ValueError) << name << " must be on a CUDA device";
    if (!t.IsContiguous()) TVM_FFI_THROW(ValueError) << name << " must be contiguous (row-major)";
}

void run(tvm::ffi::TensorView A, tvm::ffi::TensorView B, tvm::ffi::TensorView C) {
    check_operand(A, "A");
    check_operand(B, "B");
    check_operand(C, "C");
    const int64_t M = A.size(0), K = A.size(1), N = B.size(0);
    if (B.size(1) != K) TVM_FFI_THROW(ValueError) << "B must be [N, K] with K = " << K << ", got K = " << B.size(1);
    if (C.size(0) != M || C.size(1) != N)
        TVM_FFI_THROW(ValueError) << "C must be [" << M << ", " << N << "], got [" << C.size(0) << ", " << C.size(1) << "]";
    if (K % 8 != 0 || N % 8 != 0) TVM_FFI_THROW(ValueError) << "K and N must be multiples of 8 (16-byte TMA strides)";
    if (M == 0 || N == 0) return;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) TVM_FFI_THROW(ValueError) << "dimension too large";

    const int dev = A.device().device_id;
    cudaSetDevice(dev);
    cudaStream_t stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, dev));

    CUtensorMap tmA, tmB, tmC;
    std::string err = make_tensor_map_bf16_2d(&tmA, A.data_ptr(), M, K, K, kBM, kBK, Swizzle::k128B);
    if (err.empty()) err = make_tensor_map_bf16_2d(&tmB, B.data_ptr(), N, K, K, kBN / kCluster, kBK, Swizzle::k128B);
    if (err.empty()) err = make_tensor_map_bf16_2d(&tmC, C.data_ptr(), M, N, N, 64, 64, Swizzle::k128B);
    if (!err.empty()) TVM_FFI_THROW(RuntimeError) << "tensor map: " << err;

    const int m_ctiles = static_cast<int>(((M + kBM - 1) / kBM + kCluster - 1) / kCluster);
    const int n_tiles = static_cast<int>((N + kBN - 1) / kBN);
    const int grid = grid_size(dev, m_ctiles * n_tiles);

    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(grid, 1, 1);
    cfg.blockDim = dim3(kThreads, 1, 1);
    cfg.dynamicSmemBytes = kSmemBytes;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = kCluster > 1 ? 1 : 0;
    cudaError_t e = cudaLaunchKernelEx(&cfg, gemm_kernel, tmA, tmB, tmC, static_cast<int>(M), static_cast<int>(N),
                                       static_cast<int>(K));
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) TVM_FFI_THROW(RuntimeError) << "GEMM launch failed: " << cudaGetErrorString(e);
}

}  // namespace gemm

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, gemm::run);
