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

#include "sm90a.cuh"

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
