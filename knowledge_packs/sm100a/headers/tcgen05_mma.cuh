// tcgen05_mma.cuh -- the 5th-generation tensor-core MMA on sm_100a, .kind::f16 (f16/bf16 inputs).
// SASS: UTCHMMA (cta_group::1), UTCHMMA.2CTA (cta_group::2).
//
//   D[tmem] (+)= A * B      A: M x K, B: K x N (given as N x K when K-major), D: M x N fp32 in TMEM
//
//  * ONE thread issues it (not a warp, not a warpgroup): guard with elect_one_sync() inside one warp.
//    It is asynchronous: it returns at once, reads smem/TMEM later. Completion is observed only
//    through tcgen05.commit -> mbarrier (tcgen05_commit.cuh). Consecutive MMAs from the same thread
//    into the same accumulator execute in order; no fence is needed between them.
//  * K is 16 per instruction for f16/bf16; loop over K issuing one MMA per 16-deep slice with the
//    smem descriptors advanced (tcgen05_desc.cuh). accumulate = false on the very first slice of a
//    tile zero-initialises D (no separate clear of TMEM needed), true afterwards.
//  * Accumulator layout in TMEM for cta_group::1 (fp32, one 32-bit column per element):
//      M = 128: row i -> lane i, column j -> column (d_tmem + j). N columns are used.
//      M = 64 : rows 0..63 go to lanes 0..15 of each 32-lane quarter (row r -> lane 32*(r/16) + r%16).
//  * cta_group::2 (CTA pair, cluster of >= 2, ranks 2k/2k+1): issued by one thread of ONE CTA
//    (conventionally the even rank) and executes on both SMs. M = 256: each CTA supplies 128 rows of A
//    from its own smem and N/2 rows of B (K-major) from its own smem at the SAME smem offsets the
//    descriptors name; each CTA receives its own 128 x N half of D at the same TMEM address.
//    TMEM must have been allocated with tcgen05.alloc.cta_group::2.
//  * TS form: A comes from TMEM instead of smem (a_tmem = TMEM address of A, 16-bit elements packed two
//    per 32-bit column, row i in lane i). B still comes from smem. Used e.g. for P.V in attention where
//    P was written to TMEM with tcgen05.st.
#ifndef SM100_TCGEN05_MMA_CUH
#define SM100_TCGEN05_MMA_CUH

#ifndef SM100_TCGEN05_DESC_CUH
#include "tcgen05_desc.cuh"
#endif

namespace sm100 {

// SS form: A and B from shared memory (descriptors).
template <int kCtaGroup = 1>
__device__ __forceinline__ void umma_f16_ss(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t idesc,
                                            bool accumulate) {
  static_assert(kCtaGroup == 1 || kCtaGroup == 2, "cta_group is 1 or 2");
  if constexpr (kCtaGroup == 1) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "setp.ne.b32 p, %4, 0;\n\t"
        "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n\t}"
        ::"r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(static_cast<uint32_t>(accumulate))
        : "memory");
  } else {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "setp.ne.b32 p, %4, 0;\n\t"
        "tcgen05.mma.cta_group::2.kind::f16 [%0], %1, %2, %3, p;\n\t}"
        ::"r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(static_cast<uint32_t>(accumulate))
        : "memory");
  }
}

// TS form: A from tensor memory, B from shared memory.
template <int kCtaGroup = 1>
__device__ __forceinline__ void umma_f16_ts(uint32_t d_tmem, uint32_t a_tmem, uint64_t b_desc, uint32_t idesc,
                                            bool accumulate) {
  static_assert(kCtaGroup == 1 || kCtaGroup == 2, "cta_group is 1 or 2");
  if constexpr (kCtaGroup == 1) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "setp.ne.b32 p, %4, 0;\n\t"
        "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;\n\t}"
        ::"r"(d_tmem), "r"(a_tmem), "l"(b_desc), "r"(idesc), "r"(static_cast<uint32_t>(accumulate))
        : "memory");
  } else {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "setp.ne.b32 p, %4, 0;\n\t"
        "tcgen05.mma.cta_group::2.kind::f16 [%0], [%1], %2, %3, p;\n\t}"
        ::"r"(d_tmem), "r"(a_tmem), "l"(b_desc), "r"(idesc), "r"(static_cast<uint32_t>(accumulate))
        : "memory");
  }
}

}  // namespace sm100

#endif  // SM100_TCGEN05_MMA_CUH
