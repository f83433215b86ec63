// Validation kernels, group "TMA + mbarrier" (as on Hopper, plus the CTA-pair form of sm_100a).
// Expected SASS: UTMALDG (loads), UTMASTG (stores), UTMAREDG (reduce-add), SYNCS.* (mbarrier ops).
// Compiled for sm_100a in ptxgym's CPU tests; NOT run: no B200 was available. On a B200, build the
// maps on the host with build_validation_maps() (link -lcuda) and launch:
//   tma_roundtrip_kernel<<<1, 128>>>(map_in, map_out): copies the three 64 x 64 bf16 boxes at columns
//     0, 64, 128 of rows 0..63 of `in` to `out` through shared memory (expect out == in there), each
//     load with a different L2 policy (evict_first, none, evict_last).
//   tma_rank_kernel<<<1, 32>>>(map3, map4, map5): loads one box from a 3D, 4D and 5D map, stores the 3D
//     box back to the same coordinates (output == input).
//   tma_cluster_kernel<<<2, 128>>>(map_in, map_acc): cluster of 2. Multicast: rank 0 loads box (0, 0)
//     into both CTAs. CTA pair: each CTA loads box (0, 64 * rank) into its own smem, both signalling
//     rank 0's barrier. Each CTA then reduce-adds its pair box into `acc` at (0, 64 * rank), so acc gains
//     in[0:64, 0:128] once.
#include "../headers/common.cuh"
#include "../headers/mbarrier.cuh"
#include "../headers/tma.cuh"

constexpr uint32_t kBox = 64;                        // 64 x 64 bf16 box: 128 B rows, 128B swizzle
constexpr uint32_t kBoxBytes = kBox * kBox * 2;      // 8192 bytes per box

__global__ void __launch_bounds__(128)
    tma_roundtrip_kernel(const __grid_constant__ CUtensorMap map_in, const __grid_constant__ CUtensorMap map_out) {
  __shared__ __align__(1024) uint8_t tile[3][kBoxBytes];
  __shared__ __align__(8) uint64_t full;
  const uint32_t bar = sm100::smem_u32(&full);
  if (threadIdx.x == 0) {
    sm100::tma_prefetch_desc(&map_in);
    sm100::tma_prefetch_desc(&map_out);
    sm100::mbar_init(bar, 1);
    sm100::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sm100::mbar_arrive_expect_tx(bar, 3 * kBoxBytes);  // all three boxes complete on one barrier
    sm100::tma_load_2d_hint(sm100::smem_u32(tile[0]), &map_in, bar, 0, 0, sm100::l2_policy_evict_first());
    sm100::tma_load_2d(sm100::smem_u32(tile[1]), &map_in, bar, kBox, 0);
    sm100::tma_load_2d_hint(sm100::smem_u32(tile[2]), &map_in, bar, 2 * kBox, 0, sm100::l2_policy_evict_last());
  }
  sm100::mbar_wait(bar, 0);  // every thread may now read the tiles
  if (threadIdx.x == 0) {
    for (uint32_t b = 0; b < 3; ++b)
      sm100::tma_store_2d(&map_out, sm100::smem_u32(tile[b]), static_cast<int32_t>(b * kBox), 0);
    sm100::tma_store_commit();
    sm100::tma_store_wait_read<0>();  // smem may be reused (here: the CTA may exit)
    sm100::tma_store_wait<0>();       // global writes complete
  }
}

__global__ void __launch_bounds__(32) tma_rank_kernel(const __grid_constant__ CUtensorMap map3,
                                                      const __grid_constant__ CUtensorMap map4,
                                                      const __grid_constant__ CUtensorMap map5) {
  __shared__ __align__(1024) uint8_t t3[kBoxBytes], t4[kBoxBytes], t5[kBoxBytes];
  __shared__ __align__(8) uint64_t full;
  const uint32_t bar = sm100::smem_u32(&full);
  if (threadIdx.x == 0) {
    sm100::mbar_init(bar, 1);
    sm100::mbar_fence_init();
  }
  __syncwarp();
  if (threadIdx.x == 0) {
    // Boxes of all three maps are 64 x 64 x 1 (x 1 x 1): one arrival, the sum of their bytes.
    sm100::mbar_expect_tx(bar, 2 * kBoxBytes);
    sm100::mbar_arrive_expect_tx(bar, kBoxBytes);
    sm100::tma_load_3d(sm100::smem_u32(t3), &map3, bar, 0, 0, 0);
    sm100::tma_load_4d(sm100::smem_u32(t4), &map4, bar, 0, 0, 0, 0);
    sm100::tma_load_5d(sm100::smem_u32(t5), &map5, bar, 0, 0, 0, 0, 0);
  }
  sm100::mbar_wait(bar, 0);
  if (threadIdx.x == 0) {
    sm100::tma_store_3d(&map3, sm100::smem_u32(t3), 0, 0, 0);
    sm100::tma_store_commit();
    sm100::tma_store_wait<0>();
  }
}

__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)
    tma_cluster_kernel(const __grid_constant__ CUtensorMap map_in, const __grid_constant__ CUtensorMap map_acc) {
  __shared__ __align__(1024) uint8_t shared_tile[kBoxBytes];  // multicast target (same offset in both)
  __shared__ __align__(1024) uint8_t pair_tile[kBoxBytes];    // this CTA's half of a pair operand
  __shared__ __align__(8) uint64_t mc_full, pair_full, pair_seen;
  const uint32_t rank = sm100::cluster_ctarank();
  if (sm100::cluster_nctarank() != 2) __trap();  // the pair logic below assumes exactly two CTAs
  const uint32_t mc_bar = sm100::smem_u32(&mc_full);
  const uint32_t pair_bar = sm100::smem_u32(&pair_full);
  const uint32_t seen_bar = sm100::smem_u32(&pair_seen);

  if (threadIdx.x == 0) {
    sm100::mbar_init(mc_bar, 1);
    sm100::mbar_init(pair_bar, 1);
    sm100::mbar_init(seen_bar, 1);
    sm100::mbar_fence_init();
  }
  sm100::cluster_sync();  // peers' barriers exist before anyone multicasts or arrives remotely

  if (threadIdx.x == 0) {
    // Every CTA expects the multicast box on its own barrier; rank 0 alone issues the load.
    sm100::mbar_arrive_expect_tx(mc_bar, kBoxBytes);
    if (rank == 0) sm100::tma_load_2d_multicast(sm100::smem_u32(shared_tile), &map_in, mc_bar, 0, 0, 0b11);
    // Pair form: both CTAs' loads complete on rank 0's barrier, which expects both boxes.
    if (rank == 0) sm100::mbar_arrive_expect_tx(pair_bar, 2 * kBoxBytes);
    const uint32_t leader_bar = sm100::mapa_shared(pair_bar, rank & ~1u);
    sm100::tma_load_2d_cta_pair(sm100::smem_u32(pair_tile), &map_in, leader_bar,
                                static_cast<int32_t>(kBox * rank), 0);
  }
  sm100::mbar_wait<true>(mc_bar, 0);
  if (rank == 0) {
    sm100::mbar_wait<true>(pair_bar, 0);
    // Tell the peer that its pair_tile has landed (remote arrive on the peer's barrier).
    if (threadIdx.x == 0) sm100::mbar_arrive_cluster(sm100::mapa_shared(seen_bar, 1));
  } else {
    sm100::mbar_wait<true>(seen_bar, 0);
  }
  if (threadIdx.x == 0) {
    sm100::tma_reduce_add_2d(&map_acc, sm100::smem_u32(pair_tile), static_cast<int32_t>(kBox * rank), 0);
    sm100::tma_store_commit();
    sm100::tma_store_wait<0>();
  }
  sm100::cluster_sync();  // no CTA exits while a peer may still write into its shared memory
}

// Host side (compiled, not linked here): tensor maps for the kernels above. Returns the first failing
// CUresult, or CUDA_SUCCESS.
extern "C" CUresult build_validation_maps(const void* in, void* out, void* acc, uint64_t rows, uint64_t cols,
                                          CUtensorMap* map_in, CUtensorMap* map_out, CUtensorMap* map_acc,
                                          CUtensorMap* map3) {
  CUresult r = sm100::make_tensor_map_2d_bf16(map_in, in, rows, cols, cols, kBox, kBox);
  if (r == CUDA_SUCCESS) r = sm100::make_tensor_map_2d_bf16(map_out, out, rows, cols, cols, kBox, kBox);
  if (r == CUDA_SUCCESS) r = sm100::make_tensor_map_2d_bf16(map_acc, acc, rows, cols, cols, kBox, kBox);
  if (r == CUDA_SUCCESS) {
    const uint64_t dims[3] = {cols, rows, 1};
    const uint64_t strides[2] = {cols * 2, rows * cols * 2};
    const uint32_t box[3] = {kBox, kBox, 1};
    r = sm100::make_tensor_map(map3, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, in, dims, strides, box,
                               CU_TENSOR_MAP_SWIZZLE_128B);
  }
  return r;
}
