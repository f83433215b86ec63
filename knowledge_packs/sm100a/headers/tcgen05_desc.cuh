// tcgen05_desc.cuh -- descriptor builders for tcgen05.mma on sm_100a (pure bit packing; constexpr,
// usable on host and device, so they can be checked with static_assert).
//
// Two descriptors feed every tcgen05.mma:
//  1. Instruction descriptor (32 bit, register operand `idesc`) -- shapes, types, majorness.
//     Layout for .kind::f16 (bit: meaning):
//        0-1 sparsity selector (0)   2 sparse (0 = dense)   3 saturate (0)
//        4-5 D type: 0 F16, 1 F32    6 reserved
//        7-9 A type: 0 F16, 1 BF16   10-12 B type: 0 F16, 1 BF16
//        13 negate A   14 negate B   15 A major: 0 K-major, 1 MN-major   16 B major (same)
//        17-22 N >> 3   23 reserved   24-28 M >> 4   29 reserved   30-31 max shift (.ws only, 0)
//  2. Shared-memory matrix descriptor (64 bit, one per operand in smem) -- where and how a tile lies.
//        0-13  start address >> 4 (shared::cta byte address, 16 B aligned)
//        16-29 leading-dimension byte offset (LBO) >> 4
//        32-45 stride-dimension byte offset (SBO) >> 4
//        46-48 fixed 0b001 (sm_100 descriptor version; Hopper's wgmma descriptor has 0 here)
//        49-51 base offset (0 when the swizzle pattern starts on its natural boundary: 1024 B for
//              128B swizzle, 512 B for 64B, 256 B for 32B)
//        52    LBO mode (0 = relative byte offset)   53-60 fixed 0
//        61-63 swizzle: 0 none, 1 128B with 32B atoms, 2 128B, 4 64B, 6 32B   (3, 5, 7 invalid)
//
// Canonical bf16 K-major tile with 128B swizzle (what TMA SWIZZLE_128B with a {64, rows} box writes):
// each row holds 64 K-elements (128 B); 8 rows form a 1024 B swizzle atom; atoms follow each other.
//   -> SBO = 1024 (next group of 8 rows), LBO ignored for swizzled K-major (encode 16),
//      swizzle = 2, base 1024 B aligned. One MMA consumes K = 16 (32 bytes): advance the start
//      address by 32 bytes per K step inside the 128 B row (k = 0..3), then move to the next
//      64-wide K box (+ rows * 128 bytes) for k = 4..7 of a 128-deep K tile.
// MN-major bf16 with 128B swizzle (e.g. B = V[kv][d] row-major in attention's P.V, N = d):
//   rows are K, 64 MN-elements per 128 B row; SBO = byte distance between 8-row K groups (1024 for a
//   dense stack), LBO = byte distance between consecutive 64-wide MN blocks (e.g. box_rows * 128 when
//   each 64-column slab is a separate TMA box). Set the major bit of that operand to 1.
#ifndef SM100_TCGEN05_DESC_CUH
#define SM100_TCGEN05_DESC_CUH

#include <cstdint>

namespace sm100 {

enum class Swizzle : uint32_t { kNone = 0, k128B_Base32B = 1, k128B = 2, k64B = 4, k32B = 6 };
enum class DType : uint32_t { kF16 = 0, kF32 = 1 };
enum class ABType : uint32_t { kF16 = 0, kBF16 = 1 };
enum class Major : uint32_t { kK = 0, kMN = 1 };

// Valid dense .kind::f16 shapes (K is always 16):
//   cta_group::1: M = 64 or 128, N = 8..256 in steps of 8
//   cta_group::2: M = 128 or 256 (the pair's total), N = 16..256 in steps of 16
__host__ __device__ constexpr bool umma_f16_shape_ok(int cta_group, uint32_t m, uint32_t n) {
  return cta_group == 1 ? ((m == 64 || m == 128) && n >= 8 && n <= 256 && n % 8 == 0)
                        : ((m == 128 || m == 256) && n >= 16 && n <= 256 && n % 16 == 0);
}

__host__ __device__ constexpr uint32_t make_idesc_f16(uint32_t m, uint32_t n, ABType a_type, ABType b_type,
                                                      DType d_type = DType::kF32, Major a_major = Major::kK,
                                                      Major b_major = Major::kK, bool negate_a = false,
                                                      bool negate_b = false) {
  return (static_cast<uint32_t>(d_type) << 4) | (static_cast<uint32_t>(a_type) << 7) |
         (static_cast<uint32_t>(b_type) << 10) | (static_cast<uint32_t>(negate_a) << 13) |
         (static_cast<uint32_t>(negate_b) << 14) | (static_cast<uint32_t>(a_major) << 15) |
         (static_cast<uint32_t>(b_major) << 16) | ((n >> 3) << 17) | ((m >> 4) << 24);
}

// The common case: bf16 x bf16 -> fp32 accumulator, both operands K-major (C = A . B^T with A[M][K]
// and B[N][K] row-major, i.e. a "TN" GEMM, and Q.K^T in attention).
__host__ __device__ constexpr uint32_t make_idesc_bf16_f32(uint32_t m, uint32_t n, Major a_major = Major::kK,
                                                           Major b_major = Major::kK) {
  return make_idesc_f16(m, n, ABType::kBF16, ABType::kBF16, DType::kF32, a_major, b_major);
}

__host__ __device__ constexpr uint64_t make_smem_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                      Swizzle swizzle, uint32_t base_offset = 0) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4) |
         (static_cast<uint64_t>((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
         (static_cast<uint64_t>((sbo_bytes & 0x3FFFFu) >> 4) << 32) | (1ull << 46) |
         (static_cast<uint64_t>(base_offset & 7u) << 49) | (static_cast<uint64_t>(swizzle) << 61);
}

// K-major, 128B swizzle, bf16 (see above): SBO 1024, LBO encoded as 16 bytes.
__host__ __device__ constexpr uint64_t make_smem_desc_kmajor_sw128(uint32_t smem_addr) {
  return make_smem_desc(smem_addr, 16u, 1024u, Swizzle::k128B);
}

// Move a descriptor's start address by `bytes` (multiple of 16) without rebuilding it, e.g. +32 per
// K step of 16 bf16 inside a 128B-swizzled row. The address field is the low 14 bits (>> 4).
__host__ __device__ constexpr uint64_t smem_desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + static_cast<uint64_t>(bytes >> 4);
}

}  // namespace sm100

#endif  // SM100_TCGEN05_DESC_CUH
