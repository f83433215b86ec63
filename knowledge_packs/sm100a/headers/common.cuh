// common.cuh -- small helpers every sm_100a kernel of this pack uses.
// Target: nvcc -gencode=arch=compute_100a,code=sm_100a (B200). Written for ptxgym; compiled, not run
// (no B200 was available when this pack was written).
//
// Pasting into one kernel.cu: paste the pack headers in file-name order (common, mbarrier, tcgen05_*,
// tma). Each header guards itself, and its #include of another pack header is skipped once that
// header's text is already above it.
#ifndef SM100_COMMON_CUH
#define SM100_COMMON_CUH

#include <cstdint>
#include <cuda_bf16.h>

namespace sm100 {

// 32-bit shared-state-space address of a generic pointer to __shared__ memory. Every PTX operand
// written [addr] with a .shared qualifier in this pack takes this value, never a generic pointer.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ uint32_t lane_id() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
  return r;
}

// Warp index inside the CTA, made warp-uniform with a shuffle so the compiler can keep
// role dispatch (producer / MMA / epilogue warps) branch-free inside a warp.
__device__ __forceinline__ uint32_t warp_id() {
  return __shfl_sync(0xffffffffu, threadIdx.x / 32u, 0);
}

// elect.sync: exactly one active lane of the full warp returns true. Use it to pick the single
// thread that issues TMA, tcgen05.mma or tcgen05.commit (all single-thread instructions).
__device__ __forceinline__ bool elect_one_sync() {
  uint32_t is_leader;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "elect.sync _|p, 0xffffffff;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(is_leader));
  return is_leader != 0;
}

// Rank of this CTA inside its cluster (0 .. cluster size - 1). The two CTAs of a CTA pair
// (cta_group::2) have ranks 2k and 2k+1; the even one is usually the MMA issuer ("leader").
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}

// mapa: turn a shared::cta address of this CTA into the shared::cluster address of the variable at
// the same offset in CTA `cta_rank` of the cluster (for remote mbarrier arrives, 2-CTA TMA).
__device__ __forceinline__ uint32_t mapa_shared(uint32_t smem_addr, uint32_t cta_rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr), "r"(cta_rank));
  return r;
}

// Cluster-wide barrier (all threads of all CTAs of the cluster). arrive has release semantics,
// wait has acquire semantics, so smem writes before arrive are visible to peers after wait.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

// Named barrier over `nthreads` threads (multiple of 32) of the CTA; ids 1..15 (0 is __syncthreads).
// Use it to synchronise one role (e.g. the four epilogue warps) without stalling the others.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t nthreads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t nthreads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

// setmaxnreg: move registers between warpgroups. All warps of a warpgroup must execute the same
// value; the count is a multiple of 8 in [24, 256]. Typical: producer/MMA warpgroup dec to 40..56,
// epilogue/softmax warpgroups inc to 200+. Only meaningful with __launch_bounds__ fixed.
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg count");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg count");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// Two floats -> one 32-bit word holding two bf16 (lo in bits 0..15, hi in bits 16..31), round to
// nearest even. This is the packing tcgen05.st / TMEM A-operands and 16-bit global stores expect.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 2^x with the SFU (ex2.approx.ftz). For softmax compute exp(x) as exp2(x * log2(e)), folding
// log2(e) into the score scale so each element costs one FFMA and one MUFU.
__device__ __forceinline__ float exp2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// Order this thread's generic-proxy shared-memory writes (st.shared, plain C++ stores) before later
// async-proxy reads of the same bytes: a TMA store or a tcgen05.mma reading an operand from smem.
// Every writing thread executes it, then the threads synchronise, then one thread issues the op.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// %globaltimer in nanoseconds (used by the bounded mbarrier wait to report hangs).
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace sm100

#endif  // SM100_COMMON_CUH
