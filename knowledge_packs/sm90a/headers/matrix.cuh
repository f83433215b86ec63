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
#pragma once

#include "common.cuh"

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
