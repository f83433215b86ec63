// cluster.cuh - thread-block-cluster helpers for sm_90a.
//
// A cluster is a group of up to 8 CTAs (16 with a non-portable opt-in) that are scheduled together on
// one GPC and can read, write and arrive on each other's shared memory (distributed shared memory).
// Launch with cudaLaunchKernelEx + cudaLaunchAttributeClusterDimension, or __cluster_dims__(x,y,z).
#pragma once

#include "common.cuh"

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
