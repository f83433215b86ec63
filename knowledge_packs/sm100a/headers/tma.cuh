// tma.cuh -- Tensor Memory Accelerator (bulk tensor copies) for sm_100a: host tensor-map creation,
// loads 2D..5D completing on an mbarrier, multicast, the CTA-pair (cta_group::2) form, L2 cache
// hints, stores and reduce-add from shared memory, bulk-group commit/wait, async-proxy fence.
// The PTX is the Hopper TMA plus .cta_group::2. SASS: UTMALDG (load), UTMASTG (store),
// UTMAREDG (reduce), UTMACCTL.PF (descriptor prefetch), SYNCS.* (the mbarrier side).
//
// Rules that bite:
//  * The CUtensorMap must reach the kernel as a `const __grid_constant__ CUtensorMap` parameter (or
//    live in global/const memory); pass its address (&map) to the device functions below.
//  * Coordinates are in ELEMENTS, innermost dimension first: {col, row} for a row-major matrix.
//  * Destination smem: 128-byte aligned; with a swizzle mode, align to the swizzle atom (1024 B for
//    128B swizzle) so the tcgen05/wgmma descriptor's base offset can stay 0.
//  * Box inner extent in bytes must be <= the swizzle span (128 B for SWIZZLE_128B: 64 bf16).
//    Each box dimension <= 256 elements. Global strides: multiples of 16 bytes.
//  * Bytes a load brings = product of box dims * element size, also for a box that hangs over the
//    tensor edge (out-of-bounds elements are zero-filled and still counted). Use that in expect_tx.
//  * Before a TMA store reads smem written by ordinary st.shared, every writing thread executes
//    fence_proxy_async_smem(), then the threads synchronise, then one thread issues the store.
#ifndef SM100_TMA_CUH
#define SM100_TMA_CUH

#ifndef SM100_COMMON_CUH
#include "common.cuh"
#endif
#include <cuda.h>  // CUtensorMap, cuTensorMapEncodeTiled (link with -lcuda)

namespace sm100 {

// ---------------------------------------------------------------- host: tensor maps
// Encode a tiled tensor map. dims / box are innermost first; strides_bytes has rank-1 entries: the
// byte stride of dimensions 1..rank-1 (dimension 0 is contiguous). Returns the driver's CUresult;
// check it (CUDA_SUCCESS == 0): an invalid map makes the kernel fault or hang, not fail cleanly.
inline CUresult make_tensor_map(CUtensorMap* out, CUtensorMapDataType dtype, uint32_t rank,
                                const void* gptr, const uint64_t* dims, const uint64_t* strides_bytes,
                                const uint32_t* box, CUtensorMapSwizzle swizzle,
                                CUtensorMapL2promotion l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  const uint32_t element_strides[5] = {1, 1, 1, 1, 1};
  return cuTensorMapEncodeTiled(out, dtype, rank, const_cast<void*>(gptr), dims, strides_bytes, box,
                                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, l2,
                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// Row-major bf16 matrix [rows][cols] with leading dimension ld (elements) -> box [box_rows][box_cols].
// With SWIZZLE_128B keep box_cols = 64 (128 bytes) and load wider K slices as several boxes.
inline CUresult make_tensor_map_2d_bf16(CUtensorMap* out, const void* gptr, uint64_t rows, uint64_t cols,
                                        uint64_t ld, uint32_t box_rows, uint32_t box_cols,
                                        CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  const uint64_t dims[2] = {cols, rows};
  const uint64_t strides[1] = {ld * 2};
  const uint32_t box[2] = {box_cols, box_rows};
  return make_tensor_map(out, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, gptr, dims, strides, box, swizzle);
}

// ---------------------------------------------------------------- device: L2 cache policies
// 64-bit cache policies for the *_hint loads: evict_first for streamed-once data (A/B panels read by
// one CTA), evict_last for data many CTAs re-read (K/V of attention, B of a GEMM wave).
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

// Pull the descriptor into the TMA unit's cache early (once per CTA, by the issuing thread).
__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---------------------------------------------------------------- device: loads (global -> smem)
// One thread issues; the bytes land in `dst` (shared address) and complete_tx on `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

__device__ __forceinline__ void tma_load_2d_hint(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                                 int32_t c0, int32_t c1, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int32_t c0, int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

__device__ __forceinline__ void tma_load_5d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
        "r"(c4)
      : "memory");
}

// Multicast: one load writes the same box to the same smem offset in every CTA whose bit is set in
// cta_mask (bit i = cluster rank i) and performs complete_tx on the barrier at the same offset in
// each of them. Every receiving CTA must have expected those bytes on its own barrier.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                                      int32_t c0, int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

// CTA-pair form for 2-CTA MMA: each CTA of the pair loads its own half of the operands into its OWN
// smem, but signals the barrier of the MMA-issuing (leader) CTA. Pass the leader's barrier as a
// cluster address: mapa_shared(smem_u32(&full[s]), cluster_ctarank() & ~1u). The leader expects the
// bytes of BOTH CTAs' loads on that barrier.
__device__ __forceinline__ void tma_load_2d_cta_pair(uint32_t dst, const CUtensorMap* map,
                                                     uint32_t leader_bar_cluster, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2"
      " [%0], [%1, {%3, %4}], [%2];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(leader_bar_cluster), "r"(c0), "r"(c1)
      : "memory");
}

// ---------------------------------------------------------------- device: stores (smem -> global)
// Issued by one thread after the smem tile is complete and fenced (see the rules above). Completion
// is tracked by bulk groups: commit after issuing, then wait before reusing the smem (read) or
// before the kernel relies on the global data (full).
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(src), "r"(c0), "r"(c1)
               : "memory");
}

__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, uint32_t src, int32_t c0, int32_t c1,
                                             int32_t c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}

// Element-wise global += smem tile (fp32 or bf16 add, done by the TMA unit; atomic per element).
// Useful to accumulate dQ partial tiles from several CTAs without a separate reduction kernel.
__device__ __forceinline__ void tma_reduce_add_2d(const CUtensorMap* map, uint32_t src, int32_t c0,
                                                  int32_t c1) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];"
      ::"l"(reinterpret_cast<uint64_t>(map)), "r"(src), "r"(c0), "r"(c1)
      : "memory");
}

__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Wait until at most kPending committed store groups still READ their smem source (smem reusable).
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// Wait until at most kPending committed store groups are incomplete (global writes done).
template <int kPending>
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace sm100

#endif  // SM100_TMA_CUH
