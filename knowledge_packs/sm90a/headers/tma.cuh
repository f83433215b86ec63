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
#pragma once

#include <cuda.h>

#include "common.cuh"

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

// cp.reduce.async.bulk shared->global with .add.f32: global[i] += smem[i] for `bytes / 4` floats
// (bytes a multiple of 16, both addresses 16-byte aligned). The adds are performed at L2 and are
// atomic per element, so many CTAs may reduce into the same buffer (split-K partial sums, the dQ of an
// attention backward). Completion through bulk groups like bulk_store: tma_store_commit(), then
// tma_store_wait_read<k>() before the smem source is overwritten. Shows in SASS as UBLKRED.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                 ::"l"(dst), "r"(smem_u32(src)), "r"(bytes) : "memory");
}

#undef SM90_TMA_MAP

}  // namespace sm90
