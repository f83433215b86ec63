// MhaBwd.cu - expert attention backward (dQ, dK, dV) for Hopper (sm_90a), written with the ptxgym
// sm_90a pack headers, FlashAttention-3 style.
//
//   Q, K, V, O, dO, dQ, dK, dV: [B, H, S, D=128] bf16, contiguous.  LSE: [B, H, S] fp32 (natural log).
//   P = exp(Q K^T / sqrt(D) - LSE)  (causal: key j <= query i),  delta_i = sum_d dO[i, d] O[i, d],
//   dV = P^T dO,  dS = P o (dO V^T - delta),  dQ = dS K / sqrt(D),  dK = dS^T Q / sqrt(D).
//   TVM-FFI entry: run(Q, K, V, O, dO, LSE, dQ, dK, dV), destination-passing, on the caller's stream.
//
// Three kernels per call, all on the caller's stream:
//   1. prep: delta (fp32) and LSE * log2(e) for every query row, padded to a multiple of 64 rows (pad
//      rows get LSE = +inf, so their probabilities are exactly 0 and they contribute nothing).
//   2. main (one CTA per (batch*head, 128-key block), longest first when causal): the CTA keeps K_j and
//      V_j in shared memory and walks the 64-row query blocks i; dK_j and dV_j stay in registers for
//      the whole walk, dQ_i is accumulated in an fp32 workspace by bulk reductions (cp.reduce.async.bulk
//      .add.f32: one 16 KB reduction per warpgroup and query block, performed at L2).
//   3. convert: the fp32 workspace (in the warpgroup-fragment order the main kernel writes) -> dQ bf16,
//      scaled by 1/sqrt(D).
//
// Main kernel design
//   * 384 threads: warpgroup 0 = producer (one elected thread issues the TMA loads: K_j, V_j once; then
//     per query block Q_i, dO_i as 128B-swizzled boxes of 64 rows x 64 columns, and the 64 LSE / delta
//     values by 1-D bulk copies, all on one "full" mbarrier per ring stage), warpgroups 1, 2 = consumers,
//     each owning 64 of the 128 keys.
//   * Per query block, per consumer warpgroup (64 keys x 64 queries):
//       S^T  = K_w Q_i^T          8 x wgmma m64n64k16, SS, both operands K-major
//       dP^T = V_w dO_i^T         8 x wgmma m64n64k16, SS
//       P^T  = exp2(S^T * scale * log2e - LSE2)   (the LSE of a query is a column value here)
//       dS^T = P^T o (dP^T - delta)
//       dV_w += P^T dO_i          4 x wgmma m64n128k16, RS: P^T from registers, dO_i MN-major
//       dK_w += dS^T Q_i          4 x wgmma m64n128k16, RS
//       dS^T -> shared memory (stmatrix, 128B swizzle, double-buffered), both warpgroups meet, then
//       dQ_i[:, 64w..64w+63] = dS K[:, 64w..]   8 x wgmma m64n64k16, SS, A and B both MN-major
//     The RS GEMMs run while dS^T is staged; the dQ partial is staged in the fragment order and bulk-
//     reduced into the workspace while the next block's S^T and dP^T GEMMs run.
//   * Epilogue: dV and dK * scale -> bf16 -> stmatrix into the (dead) V and K tiles -> TMA stores.
//   * Keys beyond S are zero rows (TMA fill): their dS K products vanish and their dK/dV rows are
//     clipped by the TMA store, so no key mask is needed. Query rows beyond S have LSE2 = +inf.
//
// Compile-time knobs (defaults = the shipped configuration): MHA_CAUSAL, MHA_STAGES (Q/dO ring depth).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <sm90a/headers/common.cuh>
#include <sm90a/headers/matrix.cuh>
#include <sm90a/headers/mbarrier.cuh>
#include <sm90a/headers/tma.cuh>
#include <sm90a/headers/tma_host.cuh>
#include <sm90a/headers/wgmma.cuh>

#ifndef MHA_CAUSAL
#define MHA_CAUSAL 0
#endif
#ifndef MHA_STAGES
#define MHA_STAGES 2
#endif

namespace mha_bwd {

using namespace sm90;

constexpr bool kCausal = MHA_CAUSAL != 0;
constexpr int kStages = MHA_STAGES;

constexpr int kD = 128;        // head dimension (fixed by the task)
constexpr int kBN = 128;       // keys per CTA (2 consumer warpgroups x 64)
constexpr int kBM = 64;        // queries per step
constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
constexpr int kHeadGroup = 8;  // causal CTA order: heads per L2 group
constexpr uint32_t kKvHalf = 128 * 64 * 2;  // one 128-row x 64-column swizzled box of K or V: 16 KB
constexpr uint32_t kKvBytes = 2 * kKvHalf;  // a 128 x 128 bf16 tile: 32 KB
constexpr uint32_t kQHalf = 64 * 64 * 2;    // one 64-row x 64-column box of Q or dO: 8 KB
constexpr uint32_t kQBytes = 2 * kQHalf;    // a 64 x 128 tile: 16 KB
constexpr uint32_t kWgRows = 64 * 128;      // 64 rows of 128 bytes (a warpgroup's rows of one half)
constexpr uint32_t kDsBytes = 128 * 128;    // dS^T: 128 keys x 64 queries bf16 = 16 KB
constexpr uint32_t kDqBytes = 64 * 64 * 4;  // one warpgroup's fp32 dQ partial: 16 KB
constexpr uint32_t kLdBytes = 2 * kBM * 4;  // LSE2 and delta of one query block: 512 B

// Shared-memory map (offsets from a 1024-byte aligned base).
constexpr uint32_t kOffK = 0;
constexpr uint32_t kOffV = kOffK + kKvBytes;
constexpr uint32_t kOffQ = kOffV + kKvBytes;
constexpr uint32_t kOffDO = kOffQ + kStages * kQBytes;
constexpr uint32_t kOffDS = kOffDO + kStages * kQBytes;
constexpr uint32_t kOffDQ = kOffDS + 2 * kDsBytes;
constexpr uint32_t kOffLD = kOffDQ + 2 * kDqBytes;
constexpr uint32_t kOffBar = kOffLD + kStages * kLdBytes;
constexpr int kNumBars = 1 + 2 * kStages;  // kv_full, q_full[], q_empty[]
constexpr uint32_t kSmemBytes = kOffBar + kNumBars * 8 + 1024;  // +1024 for the manual alignment
static_assert(kStages >= 2 && kStages <= 3, "2 or 3 Q/dO stages");
static_assert(kSmemBytes <= 232448, "shared memory per block on sm_90 is at most 227 KB");

// Named barrier ids (0 is __syncthreads): both consumer warpgroups 1; per warpgroup 2, 3.
constexpr uint32_t kBarBoth = 1;
constexpr uint32_t kBarWg0 = 2;
constexpr uint32_t kConsumerWarps = 8;  // empty-barrier arrivals per phase

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kScale = 0.08838834764831845f;  // 1 / sqrt(128)
constexpr float kScaleLog2 = kLog2e * kScale;

// CTA order. Non-causal: the key blocks of one head are consecutive (they share Q, dO in L2). Causal:
// groups of kHeadGroup heads, inside a group the low key blocks (the longest walks) first.
struct Work {
    int kb;  // key block
    int bh;  // batch * H + head
};
__device__ __forceinline__ Work decode_work(int t, int nkb, int bh_total) {
    Work w;
    if constexpr (!kCausal) {
        w.bh = t / nkb;
        w.kb = t - w.bh * nkb;
    } else {
        const int per_group = kHeadGroup * nkb;
        const int grp = t / per_group;
        const int rem = t - grp * per_group;
        const int g = min(kHeadGroup, bh_total - grp * kHeadGroup);
        w.kb = rem / g;
        w.bh = grp * kHeadGroup + rem % g;
    }
    return w;
}

// First query block key block kb meets: causal queries >= keys.
__device__ __forceinline__ int first_qblock(int kb) {
    if constexpr (kCausal) return kb * kBN / kBM;
    return 0;
}

// ------------------------------------------------------------------------------------ the GEMMs

// T[64 x 64] = X_w[64 x 128] * Y_i[64 x 128]^T (S^T = K Q^T, dP^T = V dO^T). X_w: the warpgroup's 64
// rows of a K/V tile (halves 16 KB apart); Y_i: a Q/dO stage (halves 8 KB apart). Both K-major.
__device__ __forceinline__ void gemm_t(float (&t)[32], uint32_t x_addr, uint32_t y_addr) {
    const uint64_t dx = kmajor_desc<SmemSwizzle::k128B>(x_addr);
    const uint64_t dy = kmajor_desc<SmemSwizzle::k128B>(y_addr);
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        const uint32_t c = (kk & 3) * 32;
        wgmma_ss<64>(t, desc_advance(dx, (kk >> 2) * kKvHalf + c), desc_advance(dy, (kk >> 2) * kQHalf + c), kk > 0);
    }
}

// acc[64 x 128] += A[64 x 64 queries] * Y_i[64 queries x 128] (dV += P^T dO, dK += dS^T Q). A from
// registers (k-slice kk = a[4kk .. 4kk+3]); Y_i MN-major: SBO = 1024 per 8 queries, LBO = 8 KB between
// the two 64-column halves; k-step kk starts 16 rows = 2048 bytes further.
__device__ __forceinline__ void gemm_acc(float (&acc)[64], const uint32_t (&a)[16], uint32_t y_addr) {
    const uint64_t dy = make_smem_desc(y_addr, kQHalf, 1024, SmemSwizzle::k128B);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const uint32_t frag[4] = {a[4 * kk], a[4 * kk + 1], a[4 * kk + 2], a[4 * kk + 3]};
        wgmma_rs<128, 1>(acc, frag, desc_advance(dy, kk * 2048), true);
    }
}

// dq[64 queries x 64] = dS[64 queries x 128 keys] * K[128 keys x 64 (this warpgroup's half)]. dS is
// stored transposed (dS^T: 128 key rows of 128 bytes = 64 queries), so A is MN-major; the K half is
// MN-major for B. Both: one 64-element span along M/N, SBO = 1024 per 8 keys, k-step = 2048 bytes.
__device__ __forceinline__ void gemm_dq(float (&dq)[32], uint32_t ds_addr, uint32_t kh_addr) {
    const uint64_t da = make_smem_desc(ds_addr, kDsBytes, 1024, SmemSwizzle::k128B);
    const uint64_t db = make_smem_desc(kh_addr, kKvHalf, 1024, SmemSwizzle::k128B);
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        wgmma_ss<64, 1, 1>(dq, desc_advance(da, kk * 2048), desc_advance(db, kk * 2048), kk > 0);
    }
}

// ------------------------------------------------------------------------------ small pieces

// fp32 accumulator (order of wgmma.h) -> bf16 pairs: a[k] = (x[2k], x[2k+1]); for m64n64 this is the
// RS A fragment of the 64 x 64 tile and also the stmatrix order.
__device__ __forceinline__ void pack32(const float (&x)[32], uint32_t (&a)[16]) {
#pragma unroll
    for (int k = 0; k < 16; ++k) a[k] = pack_bf16x2(x[2 * k], x[2 * k + 1]);
}

// Store a 64-row x 64-column bf16 tile held as packed accumulator pairs (16 regs per thread) into a
// 128B-swizzled shared tile of 128-byte rows at `base` (the warpgroup's first row).
__device__ __forceinline__ void stage64(uint32_t base, const uint32_t (&a)[16], uint32_t warp, uint32_t lane) {
    const uint32_t row = 16 * warp + 8 * ((lane / 8) % 2) + lane % 8;
#pragma unroll
    for (int pc = 0; pc < 4; ++pc) {
        stmatrix_x4(base + swizzle128_offset(row, 2 * pc + lane / 16), a[4 * pc], a[4 * pc + 1], a[4 * pc + 2],
                    a[4 * pc + 3]);
    }
}

// Store a 64 x 128 fp32 accumulator, times `mul`, as bf16 into the two swizzled halves (16 KB apart)
// of a K/V tile, rows of this warpgroup starting at `base`.
__device__ __forceinline__ void stage128(uint32_t base, const float (&acc)[64], float mul, uint32_t warp,
                                         uint32_t lane) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        uint32_t a[16];
#pragma unroll
        for (int k = 0; k < 16; ++k) a[k] = pack_bf16x2(acc[32 * hf + 2 * k] * mul, acc[32 * hf + 2 * k + 1] * mul);
        stage64(base + hf * kKvHalf, a, warp, lane);
    }
}

// ------------------------------------------------------------------------------------ the kernels

struct Params {
    const float* lse2;   // [BH][s_pad], LSE * log2(e), +inf on pad rows
    const float* delta;  // [BH][s_pad]
    float* dq_acc;       // [BH][nqb][2][8][128][4] fp32 (warpgroup-fragment order)
    int seq;             // S
    int s_pad;           // S rounded up to kBM
    int bh_total;        // B * H
    int nqb;             // query blocks per head
    int nkb;             // key blocks per head
};

__global__ void __launch_bounds__(kThreads, 1)
mha_bwd_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
               const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO,
               const __grid_constant__ CUtensorMap tmdK, const __grid_constant__ CUtensorMap tmdV, Params prm) {
    extern __shared__ uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    uint8_t* smem = smem_raw + (((raw + 1023u) & ~1023u) - raw);
    const uint32_t sbase = smem_u32(smem);
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kOffBar);
    uint64_t* kv_full = bars;
    uint64_t* q_full = bars + 1;
    uint64_t* q_empty = q_full + kStages;

    const Work work = decode_work(blockIdx.x, prm.nkb, prm.bh_total);
    const int kb0 = work.kb * kBN;
    const int i0 = first_qblock(work.kb);

    const uint32_t wg = warpgroup_id();
    if (threadIdx.x == 0) {
        mbar_init(kv_full, 1);
        for (int s = 0; s < kStages; ++s) {
            mbar_init(&q_full[s], 1);
            mbar_init(&q_empty[s], kConsumerWarps);
        }
        fence_mbarrier_init();
    }
    __syncthreads();

    if (wg == 0) {
        // ------------------------------------------------------------------------ producer
        setmaxnreg_dec<24>();
        if (warp_id() == 0) {
            if (elect_one_sync()) {
                tma_prefetch_descriptor(&tmQ);
                tma_prefetch_descriptor(&tmdO);
                mbar_arrive_expect_tx(kv_full, 2 * kKvBytes);
                tma_load(smem + kOffK, &tmK, kv_full, 0, kb0, work.bh);
                tma_load(smem + kOffK + kKvHalf, &tmK, kv_full, 64, kb0, work.bh);
                tma_load(smem + kOffV, &tmV, kv_full, 0, kb0, work.bh);
                tma_load(smem + kOffV + kKvHalf, &tmV, kv_full, 64, kb0, work.bh);
                const size_t row_base = static_cast<size_t>(work.bh) * prm.s_pad;
                uint32_t n = 0;
                for (int i = i0; i < prm.nqb; ++i, ++n) {
                    const uint32_t s = n % kStages;
                    const uint32_t ph = (n / kStages) & 1u;
                    uint8_t* sq = smem + kOffQ + s * kQBytes;
                    uint8_t* sdo = smem + kOffDO + s * kQBytes;
                    uint8_t* sld = smem + kOffLD + s * kLdBytes;
                    mbar_wait(&q_empty[s], ph ^ 1u);
                    mbar_arrive_expect_tx(&q_full[s], 2 * kQBytes + kLdBytes);
                    tma_load(sq, &tmQ, &q_full[s], 0, i * kBM, work.bh);
                    tma_load(sq + kQHalf, &tmQ, &q_full[s], 64, i * kBM, work.bh);
                    tma_load(sdo, &tmdO, &q_full[s], 0, i * kBM, work.bh);
                    tma_load(sdo + kQHalf, &tmdO, &q_full[s], 64, i * kBM, work.bh);
                    bulk_load(sld, prm.lse2 + row_base + i * kBM, kBM * 4, &q_full[s]);
                    bulk_load(sld + kBM * 4, prm.delta + row_base + i * kBM, kBM * 4, &q_full[s]);
                }
            }
            __syncwarp();
        }
    } else {
        // ------------------------------------------------------------------------ consumers
        setmaxnreg_inc<240>();
        const uint32_t c = wg - 1;  // which 64 keys of the block
        const uint32_t tid = threadIdx.x - 128 * wg;
        const uint32_t warp = tid / 32, lane = tid % 32;
        const uint32_t k_rows = sbase + kOffK + c * kWgRows;  // this warpgroup's rows of K (half 0)
        const uint32_t v_rows = sbase + kOffV + c * kWgRows;
        const uint32_t k_half = sbase + kOffK + c * kKvHalf;  // K columns 64c .. 64c+63, all 128 keys
        const int key_r0 = kb0 + static_cast<int>(c * 64 + 16 * warp + lane / 4);  // thread's first key
        const int col0 = static_cast<int>(2 * (lane & 3));
        float* stage_dq = reinterpret_cast<float*>(smem + kOffDQ + c * kDqBytes);

        float dv[64], dk[64];
#pragma unroll
        for (int r = 0; r < 64; ++r) dv[r] = dk[r] = 0.f;

        mbar_wait(kv_full, 0);

        uint32_t n = 0;
        for (int i = i0; i < prm.nqb; ++i, ++n) {
            const uint32_t st = n % kStages, ph = (n / kStages) & 1u;
            const uint32_t q_addr = sbase + kOffQ + st * kQBytes;
            const uint32_t do_addr = sbase + kOffDO + st * kQBytes;
            const float* lse2 = reinterpret_cast<const float*>(smem + kOffLD + st * kLdBytes);
            const float* dlt = lse2 + kBM;
            mbar_wait(&q_full[st], ph);

            float s[32], dp[32];
            wgmma_fence();
            gemm_t(s, k_rows, q_addr);
            wgmma_commit();
            gemm_t(dp, v_rows, do_addr);
            wgmma_commit();

            // P^T in place of S^T while dP^T still runs.
            wgmma_wait<1>();
            wgmma_fence_operands(s);
            const bool diag = kCausal && (i * kBM < kb0 + kBN);  // the block touches the diagonal
#pragma unroll
            for (int jb = 0; jb < 8; ++jb) {
                const float2 l2 = *reinterpret_cast<const float2*>(lse2 + 8 * jb + col0);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = 4 * jb + e;
                    float p = exp2_approx(fmaf(s[r], kScaleLog2, -((e & 1) ? l2.y : l2.x)));
                    if (diag) {
                        const int q = i * kBM + 8 * jb + col0 + (e & 1);
                        const int key = key_r0 + 8 * (e >> 1);
                        if (q < key) p = 0.f;
                    }
                    s[r] = p;
                }
            }
            uint32_t pp[16];
            pack32(s, pp);

            wgmma_wait<0>();
            wgmma_fence_operands(dp);
#pragma unroll
            for (int jb = 0; jb < 8; ++jb) {
                const float2 d2 = *reinterpret_cast<const float2*>(dlt + 8 * jb + col0);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = 4 * jb + e;
                    dp[r] = s[r] * (dp[r] - ((e & 1) ? d2.y : d2.x));
                }
            }
            uint32_t dsp[16];
            pack32(dp, dsp);

            // dV += P^T dO_i, dK += dS^T Q_i (running while dS^T is staged for the dQ GEMM).
            wgmma_fence();
            gemm_acc(dv, pp, do_addr);
            gemm_acc(dk, dsp, q_addr);
            wgmma_commit();

            const uint32_t ds_buf = sbase + kOffDS + (n & 1u) * kDsBytes;
            stage64(ds_buf + c * kWgRows, dsp, warp, lane);
            fence_proxy_async_shared();
            named_barrier_sync(kBarBoth, 256);  // both halves of dS^T are in place

            float dq[32];
            wgmma_fence();
            gemm_dq(dq, ds_buf, k_half);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operands(dv);
            wgmma_fence_operands(dk);
            wgmma_fence_operands(dq);
            if (lane == 0) mbar_arrive(&q_empty[st]);  // Q_i, dO_i, LSE2, delta no longer read

            // dQ partial -> staging (fragment order, conflict-free) -> bulk reduction into the workspace.
            if (tid == 0) tma_store_wait_read<0>();  // the previous reduction has read the staging buffer
            named_barrier_sync(kBarWg0 + c, 128);
#pragma unroll
            for (int ch = 0; ch < 8; ++ch) {
                reinterpret_cast<float4*>(stage_dq)[ch * 128 + tid] =
                    make_float4(dq[4 * ch], dq[4 * ch + 1], dq[4 * ch + 2], dq[4 * ch + 3]);
            }
            fence_proxy_async_shared();
            named_barrier_sync(kBarWg0 + c, 128);
            if (tid == 0) {
                float* dst = prm.dq_acc + ((static_cast<size_t>(work.bh) * prm.nqb + i) * 2 + c) * (kDqBytes / 4);
                bulk_reduce_add_f32(dst, stage_dq, kDqBytes);
                tma_store_commit();
            }
        }

        // Epilogue: K is still read by the other warpgroup's dQ GEMM until it passes this barrier.
        named_barrier_sync(kBarBoth, 256);
        stage128(sbase + kOffV + c * kWgRows, dv, 1.f, warp, lane);
        stage128(sbase + kOffK + c * kWgRows, dk, kScale, warp, lane);
        fence_proxy_async_shared();
        named_barrier_sync(kBarWg0 + c, 128);
        if (tid == 0) {
            const int row = kb0 + static_cast<int>(c) * 64;
            tma_store(&tmdV, smem + kOffV + c * kWgRows, 0, row, work.bh);
            tma_store(&tmdV, smem + kOffV + kKvHalf + c * kWgRows, 64, row, work.bh);
            tma_store(&tmdK, smem + kOffK + c * kWgRows, 0, row, work.bh);
            tma_store(&tmdK, smem + kOffK + kKvHalf + c * kWgRows, 64, row, work.bh);
            tma_store_commit();
            tma_store_wait<0>();  // also covers the last dQ reduction
        }
    }
}

// delta = rowsum(dO * O) and LSE2 = LSE * log2(e) per query row; one warp per (padded) row.
__global__ void mha_bwd_prep_kernel(const __nv_bfloat16* __restrict__ O, const __nv_bfloat16* __restrict__ dO,
                                    const float* __restrict__ lse, float* __restrict__ lse2,
                                    float* __restrict__ delta, int seq, int s_pad, int64_t rows) {
    const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (warp >= rows) return;
    const int64_t bh = warp / s_pad;
    const int s = static_cast<int>(warp - bh * s_pad);
    float sum = 0.f;
    if (s < seq) {
        const int64_t off = (bh * seq + s) * kD + lane * 4;
        const uint2 o = *reinterpret_cast<const uint2*>(O + off);
        const uint2 g = *reinterpret_cast<const uint2*>(dO + off);
        const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&o);
        const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&g);
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const float2 of = __bfloat1622float2(o2[k]);
            const float2 gf = __bfloat1622float2(g2[k]);
            sum = fmaf(of.x, gf.x, fmaf(of.y, gf.y, sum));
        }
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    if (lane == 0) {
        delta[warp] = sum;
        lse2[warp] = s < seq ? lse[bh * seq + s] * kLog2e : INFINITY;
    }
}

// dQ = scale * workspace, un-permuting the fragment order: float4 f of a warpgroup chunk is
// (chunk ch = f / 128, thread t = f % 128) and holds accumulator registers 4ch .. 4ch+3 of thread t.
__global__ void mha_bwd_dq_kernel(const float4* __restrict__ acc, __nv_bfloat16* __restrict__ dq, int seq,
                                  int nqb, int64_t total4) {
    const int64_t f = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (f >= total4) return;
    const int t = static_cast<int>(f % 128);
    const int ch = static_cast<int>((f / 128) % 8);
    const int w = static_cast<int>((f / 1024) % 2);
    const int64_t blk = f / 2048;
    const int qb = static_cast<int>(blk % nqb);
    const int64_t bh = blk / nqb;
    const float4 v = acc[f];
    const int row = qb * kBM + 16 * (t / 32) + (t % 32) / 4;
    const int col = 64 * w + 8 * ch + 2 * (t % 4);
    if (row < seq) {
        *reinterpret_cast<__nv_bfloat162*>(dq + (bh * seq + row) * kD + col) =
            __floats2bfloat162_rn(v.x * kScale, v.y * kScale);
    }
    if (row + 8 < seq) {
        *reinterpret_cast<__nv_bfloat162*>(dq + (bh * seq + row + 8) * kD + col) =
            __floats2bfloat162_rn(v.z * kScale, v.w * kScale);
    }
}

// ------------------------------------------------------------------------------------ host side

void check_bhsd(const tvm::ffi::TensorView& t, const char* name, const tvm::ffi::TensorView& ref) {
    const DLDataType dt = t.dtype();
    if (t.ndim() != 4) TVM_FFI_THROW(ValueError) << name << " must be 4-D [B, H, S, D], got " << t.ndim() << " dims";
    if (dt.code != kDLBfloat || dt.bits != 16 || dt.lanes != 1) TVM_FFI_THROW(TypeError) << name << " must be bfloat16";
    if (t.device().device_type != kDLCUDA) TVM_FFI_THROW(ValueError) << name << " must be on a CUDA device";
    if (!t.IsContiguous()) TVM_FFI_THROW(ValueError) << name << " must be contiguous";
    for (int d = 0; d < 4; ++d) {
        if (t.size(d) != ref.size(d))
            TVM_FFI_THROW(ValueError) << name << " must have the shape of Q [" << ref.size(0) << ", " << ref.size(1)
                                      << ", " << ref.size(2) << ", " << ref.size(3) << "]";
    }
}

// Per-device scratch (dQ accumulator, LSE2, delta), grown on demand and kept for the process.
struct Workspace {
    float* dq_acc = nullptr;
    size_t dq_floats = 0;
    float* rows = nullptr;  // LSE2 then delta
    size_t row_floats = 0;
};

float* grow(float*& p, size_t& have, size_t need) {
    if (need > have) {
        if (p != nullptr) cudaFree(p);
        p = nullptr;
        have = 0;
        const cudaError_t e = cudaMalloc(&p, need * sizeof(float));
        if (e != cudaSuccess) TVM_FFI_THROW(RuntimeError) << "workspace allocation failed: " << cudaGetErrorString(e);
        have = need;
    }
    return p;
}

void run(tvm::ffi::TensorView Q, tvm::ffi::TensorView K, tvm::ffi::TensorView V, tvm::ffi::TensorView O,
         tvm::ffi::TensorView dO, tvm::ffi::TensorView LSE, tvm::ffi::TensorView dQ, tvm::ffi::TensorView dK,
         tvm::ffi::TensorView dV) {
    check_bhsd(Q, "Q", Q);
    check_bhsd(K, "K", Q);
    check_bhsd(V, "V", Q);
    check_bhsd(O, "O", Q);
    check_bhsd(dO, "dO", Q);
    check_bhsd(dQ, "dQ", Q);
    check_bhsd(dK, "dK", Q);
    check_bhsd(dV, "dV", Q);
    const int64_t B = Q.size(0), H = Q.size(1), S = Q.size(2), D = Q.size(3);
    if (D != kD) TVM_FFI_THROW(ValueError) << "head dimension must be 128, got " << D;
    const DLDataType ldt = LSE.dtype();
    if (LSE.ndim() != 3 || LSE.size(0) != B || LSE.size(1) != H || LSE.size(2) != S)
        TVM_FFI_THROW(ValueError) << "LSE must be [" << B << ", " << H << ", " << S << "]";
    if (ldt.code != kDLFloat || ldt.bits != 32 || ldt.lanes != 1) TVM_FFI_THROW(TypeError) << "LSE must be float32";
    if (!LSE.IsContiguous() || LSE.device().device_type != kDLCUDA)
        TVM_FFI_THROW(ValueError) << "LSE must be a contiguous CUDA tensor";
    if (B == 0 || H == 0 || S == 0) return;
    const int64_t BH = B * H;
    if (S > (1 << 28) || BH > (1 << 24)) TVM_FFI_THROW(ValueError) << "tensor too large";

    const int dev = Q.device().device_id;
    cudaSetDevice(dev);
    cudaStream_t stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, dev));

    Params prm;
    prm.seq = static_cast<int>(S);
    prm.nqb = static_cast<int>((S + kBM - 1) / kBM);
    prm.nkb = static_cast<int>((S + kBN - 1) / kBN);
    prm.s_pad = prm.nqb * kBM;
    prm.bh_total = static_cast<int>(BH);
    const int64_t ctas = static_cast<int64_t>(prm.nkb) * BH;
    if (ctas > INT32_MAX) TVM_FFI_THROW(ValueError) << "too many key blocks";

    static Workspace ws[64];
    if (dev < 0 || dev >= 64) TVM_FFI_THROW(ValueError) << "device index out of range";
    const size_t rows = static_cast<size_t>(BH) * prm.s_pad;
    const size_t dq_floats = static_cast<size_t>(BH) * prm.nqb * kBM * kD;
    float* acc = grow(ws[dev].dq_acc, ws[dev].dq_floats, dq_floats);
    float* row_buf = grow(ws[dev].rows, ws[dev].row_floats, 2 * rows);
    prm.lse2 = row_buf;
    prm.delta = row_buf + rows;
    prm.dq_acc = acc;

    // [B*H][S][128] bf16: dims innermost first, byte strides of dims 1 and 2.
    const uint64_t dims[3] = {static_cast<uint64_t>(kD), static_cast<uint64_t>(S), static_cast<uint64_t>(BH)};
    const uint64_t strides[2] = {static_cast<uint64_t>(kD) * 2, static_cast<uint64_t>(S) * kD * 2};
    const uint32_t box_kv[3] = {64, 128, 1};
    const uint32_t box_q[3] = {64, 64, 1};
    CUtensorMap tmQ, tmK, tmV, tmdO, tmdK, tmdV;
    std::string err = make_tensor_map_bf16(&tmQ, Q.data_ptr(), 3, dims, strides, box_q, Swizzle::k128B);
    if (err.empty()) err = make_tensor_map_bf16(&tmK, K.data_ptr(), 3, dims, strides, box_kv, Swizzle::k128B);
    if (err.empty()) err = make_tensor_map_bf16(&tmV, V.data_ptr(), 3, dims, strides, box_kv, Swizzle::k128B);
    if (err.empty()) err = make_tensor_map_bf16(&tmdO, dO.data_ptr(), 3, dims, strides, box_q, Swizzle::k128B);
    if (err.empty()) err = make_tensor_map_bf16(&tmdK, dK.data_ptr(), 3, dims, strides, box_q, Swizzle::k128B);
    if (err.empty()) err = make_tensor_map_bf16(&tmdV, dV.data_ptr(), 3, dims, strides, box_q, Swizzle::k128B);
    if (!err.empty()) TVM_FFI_THROW(RuntimeError) << "tensor map: " << err;

    static bool attr_set = false;
    if (!attr_set) {
        cudaError_t e = cudaFuncSetAttribute(mha_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        if (e != cudaSuccess) TVM_FFI_THROW(RuntimeError) << "cudaFuncSetAttribute: " << cudaGetErrorString(e);
        attr_set = true;
    }

    cudaError_t e = cudaMemsetAsync(acc, 0, dq_floats * sizeof(float), stream);
    if (e != cudaSuccess) TVM_FFI_THROW(RuntimeError) << "workspace clear failed: " << cudaGetErrorString(e);
    const int64_t prep_threads = static_cast<int64_t>(rows) * 32;
    mha_bwd_prep_kernel<<<static_cast<unsigned>((prep_threads + 255) / 256), 256, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(O.data_ptr()), static_cast<const __nv_bfloat16*>(dO.data_ptr()),
        static_cast<const float*>(LSE.data_ptr()), row_buf, row_buf + rows, prm.seq, prm.s_pad,
        static_cast<int64_t>(rows));
    mha_bwd_kernel<<<static_cast<unsigned>(ctas), kThreads, kSmemBytes, stream>>>(tmQ, tmK, tmV, tmdO, tmdK, tmdV,
                                                                                  prm);
    const int64_t total4 = static_cast<int64_t>(dq_floats / 4);
    mha_bwd_dq_kernel<<<static_cast<unsigned>((total4 + 255) / 256), 256, 0, stream>>>(
        reinterpret_cast<const float4*>(acc), static_cast<__nv_bfloat16*>(dQ.data_ptr()), prm.seq, prm.nqb, total4);
    e = cudaGetLastError();
    if (e != cudaSuccess) TVM_FFI_THROW(RuntimeError) << "attention backward launch failed: " << cudaGetErrorString(e);
}

}  // namespace mha_bwd

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, mha_bwd::run);
