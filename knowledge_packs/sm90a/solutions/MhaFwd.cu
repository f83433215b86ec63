// MhaFwd.cu - expert attention forward (O and natural-log LSE) for Hopper (sm_90a), written with the
// ptxgym sm_90a pack headers, FlashAttention-3 style.
//
//   Q, K, V, O: [B, H, S, D=128] bf16, contiguous.  LSE: [B, H, S] fp32.
//   O = softmax(Q K^T / sqrt(D)) V,  LSE[i] = ln sum_j exp(q_i . k_j / sqrt(D))   (causal: j <= i)
//   TVM-FFI entry: run(Q, K, V, O, LSE), destination-passing, on the caller's stream.
//
// Design
//   * Work unit ("tile") = one (batch*head, 128-query block). Q, K, V, O are seen by TMA as 3-D tensors
//     [B*H][S][128]; a 128 x 128 bf16 tile is two 128B-swizzled boxes of 128 rows x 64 columns (16 KB).
//   * 384 threads: warpgroup 0 = producer (one elected thread issues every TMA load, registers lowered
//     with setmaxnreg), warpgroups 1 and 2 = consumers, each owning 64 of the 128 query rows.
//   * Shared memory: Q tile (32 KB, loaded once per tile; reused as the O staging buffer of the TMA
//     store), and a kStages-deep ring of K tiles and of V tiles (32 KB each), each slot with its own
//     full (TMA bytes) and empty (one arrival per consumer warp) mbarrier, so S = Q K^T of block j can
//     start before V_j has landed.
//   * S = Q K_j^T: 8 x wgmma.m64n128k16 SS form (Q and K both K-major, 128B swizzle).
//     O += P V_j: 8 x wgmma.m64n128k16 RS form: P stays in registers (the fp32 S accumulator packed to
//     bf16 pairs is exactly the A fragment), V is the MN-major B operand (transpose flag 1; LBO = the
//     16 KB distance between the two 64-column halves, SBO = 1024 B per 8 keys).
//   * Online softmax in the exp2 domain with the scale folded into one FFMA per element; row sums stay
//     per-thread partials until the end (a row's 4 owner lanes share the same rescale factors).
//   * Intra-warpgroup overlap (MHA_OVERLAP=1, the corrected FlashAttention-3 Algorithm 2): iteration j
//     issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} back to back, waits only for S_j (wait_group 1),
//     does the softmax of S_j while the P V GEMM runs, then waits for it, rescales O and carries
//     P_j -> P_{j-1}. The loop runs j = 1 .. T-1 inclusive and a tail GEMM multiplies the last P.
//   * Ping-pong between the two consumer warpgroups (MHA_PINGPONG=1): two named barriers hand the
//     tensor cores back and forth, so one warpgroup's exponentials overlap the other's GEMMs.
//   * Causal (MHA_CAUSAL=1): query block i visits key blocks 0..i; only the last (diagonal) block is
//     masked; tiles are ordered longest first inside groups of kHeadGroup heads (L2 reuse of K/V).
//     Any S works: keys beyond S are masked, rows beyond S are zero-filled by TMA and clipped on store.
//   * MHA_PERSISTENT=1: one CTA per SM walks the tile list with a static stride; the producer streams
//     the next tile's K/V into the ring while the consumers still finish the current one.
//   * Epilogue: O / l -> bf16 -> stmatrix into the (dead) Q tile rows of the warpgroup in the 128B
//     swizzle -> fence.proxy.async -> TMA store; LSE = m * scale + ln(l) by the lane owning the row.
//
// Compile-time knobs (defaults = the shipped configuration): MHA_CAUSAL, MHA_STAGES, MHA_OVERLAP,
// MHA_PINGPONG, MHA_PERSISTENT, MHA_PV_SPLIT (1: two m64n64 P V GEMMs per k-step instead of one m64n128).
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
#ifndef MHA_OVERLAP
#define MHA_OVERLAP 1
#endif
#ifndef MHA_PINGPONG
#define MHA_PINGPONG 1
#endif
#ifndef MHA_PERSISTENT
#define MHA_PERSISTENT 0
#endif
#ifndef MHA_PV_SPLIT
#define MHA_PV_SPLIT 0
#endif

namespace mha {

using namespace sm90;

constexpr bool kCausal = MHA_CAUSAL != 0;
constexpr int kStages = MHA_STAGES;
constexpr bool kOverlap = MHA_OVERLAP != 0;
constexpr bool kPingPong = MHA_PINGPONG != 0;
constexpr bool kPersistent = MHA_PERSISTENT != 0;
constexpr bool kPvSplit = MHA_PV_SPLIT != 0;

constexpr int kD = 128;                 // head dimension (fixed by the task)
constexpr int kBM = 128;                // query rows per tile (2 consumer warpgroups x 64)
constexpr int kBN = 128;                // keys per K/V block
constexpr int kThreads = 384;           // producer warpgroup + 2 consumer warpgroups
constexpr int kHeadGroup = 8;           // causal tile order: heads per L2 group
constexpr uint32_t kHalfBytes = 128 * 64 * 2;     // one 128-row x 64-column swizzled box: 16 KB
constexpr uint32_t kTileBytes = 2 * kHalfBytes;   // a 128 x 128 bf16 tile: 32 KB
constexpr uint32_t kWgRowsBytes = 64 * 128;       // 64 rows of one half (a warpgroup's share): 8 KB

// Shared-memory map (offsets from a 1024-byte aligned base).
constexpr uint32_t kOffQ = 0;
constexpr uint32_t kOffK = kTileBytes;
constexpr uint32_t kOffV = kOffK + kStages * kTileBytes;
constexpr uint32_t kOffBar = kOffV + kStages * kTileBytes;
constexpr int kNumBars = 2 + 4 * kStages;  // q_full, q_empty, k_full[], k_empty[], v_full[], v_empty[]
constexpr uint32_t kSmemBytes = kOffBar + kNumBars * 8 + 1024;  // +1024 for the manual alignment
static_assert(kStages >= 2 && kStages <= 3, "2 or 3 K/V stages");
static_assert(kSmemBytes <= 232448, "shared memory per block on sm_90 is at most 227 KB");

// Named barrier ids (0 is __syncthreads): ping-pong turns 1, 2; per-warpgroup epilogue 3, 4.
constexpr uint32_t kBarTurn0 = 1;
constexpr uint32_t kBarEpi0 = 3;

// Empty-barrier arrivals per phase: one elected lane per consumer warp (2 warpgroups x 4 warps).
constexpr uint32_t kConsumerWarps = 8;

// log2(e) / sqrt(128): scores are scaled into the exp2 domain with one FFMA.
constexpr float kScaleLog2 = 1.4426950408889634f * 0.08838834764831845f;
constexpr float kScale = 0.08838834764831845f;  // 1 / sqrt(128), for the natural-log LSE

struct Tile {
    int qb;  // query block
    int bh;  // batch * H + head
};

// Tile order. Non-causal: the query blocks of one head are consecutive, so the CTAs running at the
// same time share K/V in L2. Causal: groups of kHeadGroup heads, inside a group longest (highest
// query block) first, so the short tiles fill the tail of the schedule.
__device__ __forceinline__ Tile decode_tile(int t, int nqb, int bh_total) {
    Tile r;
    if constexpr (!kCausal) {
        r.bh = t / nqb;
        r.qb = t - r.bh * nqb;
    } else {
        const int per_group = kHeadGroup * nqb;
        const int grp = t / per_group;
        const int rem = t - grp * per_group;
        const int g = min(kHeadGroup, bh_total - grp * kHeadGroup);
        r.qb = nqb - 1 - rem / g;
        r.bh = grp * kHeadGroup + rem % g;
    }
    return r;
}

// Number of K/V blocks a query block visits.
__device__ __forceinline__ int kv_blocks(int qb, int nkb) {
    if constexpr (kCausal) return min(qb + 1, nkb);
    return nkb;
}

// ------------------------------------------------------------------------------------ the GEMMs

// S[64 x 128] = Q_wg[64 x 128] * K_blk[128 x 128]^T. Both operands K-major in 128B-swizzled halves of
// 64 columns: k-step kk reads half kk/4 at +32 bytes per 16 columns.
__device__ __forceinline__ void gemm_qk(float (&s)[64], uint32_t q_addr, uint32_t k_addr) {
    const uint64_t dq = kmajor_desc<SmemSwizzle::k128B>(q_addr);
    const uint64_t dk = kmajor_desc<SmemSwizzle::k128B>(k_addr);
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        const uint32_t off = (kk >> 2) * kHalfBytes + (kk & 3) * 32;
        wgmma_ss<128>(s, desc_advance(dq, off), desc_advance(dk, off), kk > 0);
    }
}

// O[64 x 128] += P[64 x 128 keys] * V_blk[128 keys x 128]. P from registers (bf16 pairs, k-slice kk =
// p[4kk .. 4kk+3]); V is MN-major: 8 keys x 128 bytes per swizzle atom, SBO = 1024 between 8-key
// groups, LBO = 16 KB between the two 64-column halves; k-step kk starts 16 keys = 2048 bytes further.
__device__ __forceinline__ void gemm_pv(float (&o)[64], const uint32_t (&p)[32], uint32_t v_addr) {
    const uint64_t dv = make_smem_desc(v_addr, kHalfBytes, 1024, SmemSwizzle::k128B);
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
        if constexpr (!kPvSplit) {
            wgmma_rs<128, 1>(o, a, desc_advance(dv, kk * 2048), true);
        } else {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                wgmma_rs<64, 1>(*reinterpret_cast<float(*)[32]>(&o[32 * h]), a,
                                desc_advance(dv, h * kHalfBytes + kk * 2048), true);
            }
        }
    }
}

// ------------------------------------------------------------------------------ softmax pieces
//
// Accumulator register i of a thread (warp w, lane l) holds row 16w + l/4 + 8*((i>>1)&1), column
// 8*(i>>2) + 2*(l&3) + (i&1) of the 64 x 128 tile: two rows per thread ("h" = (i>>1)&1), 32 values each.

// Mask columns >= lim[h] of row h (keys beyond S, or above the diagonal) to -inf.
__device__ __forceinline__ void apply_mask(float (&s)[64], int lim0, int lim1, uint32_t lane) {
    const int c0 = 2 * static_cast<int>(lane & 3);
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        const int col = 8 * (i >> 2) + c0 + (i & 1);
        const int lim = ((i >> 1) & 1) ? lim1 : lim0;
        if (col >= lim) s[i] = -INFINITY;
    }
}

// Mask key block j for the thread's two rows (global query indices qrow0 and qrow0 + 8): keys >= S,
// and for causal attention keys above the diagonal. Only the last block a tile visits needs it.
__device__ __forceinline__ void mask_block(float (&s)[64], int j, int seq, int qrow0, uint32_t lane) {
    const int kv0 = j * kBN;
    int lim0 = seq - kv0, lim1 = seq - kv0;
    if constexpr (kCausal) {
        lim0 = min(lim0, qrow0 - kv0 + 1);
        lim1 = min(lim1, qrow0 + 8 - kv0 + 1);
    }
    apply_mask(s, lim0, lim1, lane);
}

// One online-softmax step on raw scores s (in place: s becomes P in fp32). m: running max of raw
// scores; l: this thread's partial row sums; corr: factor the previous O and l must be scaled by.
template <bool kFirst>
__device__ __forceinline__ void softmax_step(float (&s)[64], float (&m)[2], float (&l)[2], float (&corr)[2]) {
    float mx[2][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) mx[h][0] = mx[h][1] = kFirst ? -INFINITY : m[h];
#pragma unroll
    for (int i = 0; i < 64; ++i) mx[(i >> 1) & 1][(i >> 2) & 1] = fmaxf(mx[(i >> 1) & 1][(i >> 2) & 1], s[i]);
    float nb[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float v = fmaxf(mx[h][0], mx[h][1]);
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
        const float m_use = (v == -INFINITY) ? 0.f : v;  // a fully masked row would give NaN otherwise
        corr[h] = kFirst ? 0.f : exp2_approx((m[h] - m_use) * kScaleLog2);
        m[h] = v;
        nb[h] = -m_use * kScaleLog2;
    }
    float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        const int h = (i >> 1) & 1;
        s[i] = exp2_approx(fmaf(s[i], kScaleLog2, nb[h]));
        sum[h][(i >> 2) & 1] += s[i];
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = (kFirst ? 0.f : l[h] * corr[h]) + (sum[h][0] + sum[h][1]);
}

// fp32 P (accumulator order) -> bf16 A fragments: p[k] = (s[2k], s[2k+1]).
__device__ __forceinline__ void pack_p(const float (&s)[64], uint32_t (&p)[32]) {
#pragma unroll
    for (int k = 0; k < 32; ++k) p[k] = pack_bf16x2(s[2 * k], s[2 * k + 1]);
}

__device__ __forceinline__ void scale_rows(float (&o)[64], const float (&f)[2]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] *= f[(i >> 1) & 1];
}

// Ping-pong between the consumer warpgroups: wait for my turn on the tensor cores / pass it on.
__device__ __forceinline__ void turn_wait(uint32_t wg) {
    if constexpr (kPingPong) named_barrier_sync(kBarTurn0 + wg, 256);
}
__device__ __forceinline__ void turn_pass(uint32_t wg) {
    if constexpr (kPingPong) named_barrier_arrive(kBarTurn0 + (wg ^ 1u), 256);
}

// ------------------------------------------------------------------------------------ the kernel

struct Params {
    float* lse;
    int seq;       // S
    int bh_total;  // B * H
    int nqb;       // query blocks per head
    int nkb;       // key blocks per head
    int ntiles;
};

__global__ void __launch_bounds__(kThreads, 1)
mha_fwd_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
               const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmO, Params prm) {
    extern __shared__ uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    uint8_t* smem = smem_raw + (((raw + 1023u) & ~1023u) - raw);
    const uint32_t sbase = smem_u32(smem);
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kOffBar);
    uint64_t* q_full = bars;
    uint64_t* q_empty = bars + 1;
    uint64_t* k_full = bars + 2;
    uint64_t* k_empty = k_full + kStages;
    uint64_t* v_full = k_empty + kStages;
    uint64_t* v_empty = v_full + kStages;

    const uint32_t wg = warpgroup_id();
    if (threadIdx.x == 0) {
        mbar_init(q_full, 1);
        mbar_init(q_empty, 2);  // one arrival per consumer warpgroup (after its O store read the buffer)
        for (int s = 0; s < kStages; ++s) {
            mbar_init(&k_full[s], 1);
            mbar_init(&k_empty[s], kConsumerWarps);
            mbar_init(&v_full[s], 1);
            mbar_init(&v_empty[s], kConsumerWarps);
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
                tma_prefetch_descriptor(&tmK);
                tma_prefetch_descriptor(&tmV);
                tma_prefetch_descriptor(&tmO);
                uint32_t n = 0;  // K/V blocks issued so far (ring position)
                int it = 0;
                for (int t = blockIdx.x; t < prm.ntiles; t += gridDim.x, ++it) {
                    const Tile tile = decode_tile(t, prm.nqb, prm.bh_total);
                    const int T = kv_blocks(tile.qb, prm.nkb);
                    for (int j = 0; j < T; ++j, ++n) {
                        const uint32_t s = n % kStages;
                        const uint32_t ph = (n / kStages) & 1u;
                        uint8_t* sk = smem + kOffK + s * kTileBytes;
                        uint8_t* sv = smem + kOffV + s * kTileBytes;
                        mbar_wait(&k_empty[s], ph ^ 1u);
                        mbar_arrive_expect_tx(&k_full[s], kTileBytes);
                        tma_load(sk, &tmK, &k_full[s], 0, j * kBN, tile.bh);
                        tma_load(sk + kHalfBytes, &tmK, &k_full[s], 64, j * kBN, tile.bh);
                        if (j == 0) {  // Q after K_0: K_0 may already stream while the previous O is stored
                            mbar_wait(q_empty, static_cast<uint32_t>(it & 1) ^ 1u);
                            mbar_arrive_expect_tx(q_full, kTileBytes);
                            tma_load(smem + kOffQ, &tmQ, q_full, 0, tile.qb * kBM, tile.bh);
                            tma_load(smem + kOffQ + kHalfBytes, &tmQ, q_full, 64, tile.qb * kBM, tile.bh);
                        }
                        mbar_wait(&v_empty[s], ph ^ 1u);
                        mbar_arrive_expect_tx(&v_full[s], kTileBytes);
                        tma_load(sv, &tmV, &v_full[s], 0, j * kBN, tile.bh);
                        tma_load(sv + kHalfBytes, &tmV, &v_full[s], 64, j * kBN, tile.bh);
                    }
                }
            }
            __syncwarp();
        }
    } else {
        // ------------------------------------------------------------------------ consumers
        setmaxnreg_inc<240>();
        const uint32_t c = wg - 1;  // 0 or 1: which 64 query rows of the tile
        const uint32_t tid = threadIdx.x - 128 * wg;
        const uint32_t warp = tid / 32, lane = tid % 32;
        const uint32_t q_addr = sbase + kOffQ + c * kWgRowsBytes;
        const int row0 = static_cast<int>(c * 64 + 16 * warp + lane / 4);  // thread's first row in the tile
        const bool need_mask = kCausal || (prm.seq % kBN != 0);

        if (kPingPong && c == 1) named_barrier_arrive(kBarTurn0 + 0, 256);  // warpgroup 0 goes first

        uint32_t n = 0;  // K/V blocks consumed so far
        int it = 0;
        for (int t = blockIdx.x; t < prm.ntiles; t += gridDim.x, ++it) {
            const Tile tile = decode_tile(t, prm.nqb, prm.bh_total);
            const int T = kv_blocks(tile.qb, prm.nkb);
            const int qrow0 = tile.qb * kBM + row0;  // global query index of the thread's first row

            float o[64];
#pragma unroll
            for (int i = 0; i < 64; ++i) o[i] = 0.f;
            float s[64];
            uint32_t p[32];
            float m[2], l[2], corr[2];

            mbar_wait(q_full, static_cast<uint32_t>(it & 1));

            // Prologue: S_0 = Q K_0^T, its softmax gives P_0 (not yet multiplied by V_0).
            {
                const uint32_t st = n % kStages, ph = (n / kStages) & 1u;
                mbar_wait(&k_full[st], ph);
                turn_wait(c);
                wgmma_fence();
                gemm_qk(s, q_addr, sbase + kOffK + st * kTileBytes);
                wgmma_commit();
                turn_pass(c);
                wgmma_wait<0>();
                wgmma_fence_operands(s);
                if (lane == 0) mbar_arrive(&k_empty[st]);
                if (need_mask && T == 1) mask_block(s, 0, prm.seq, qrow0, lane);
                softmax_step<true>(s, m, l, corr);
                pack_p(s, p);
            }

            // Main loop, j = 1 .. T-1 inclusive: S_j and O += P_{j-1} V_{j-1} in flight together.
            for (int j = 1; j < T; ++j) {
                const uint32_t nk = n + j, nv = n + j - 1;
                const uint32_t sk = nk % kStages, pk = (nk / kStages) & 1u;
                const uint32_t sv = nv % kStages, pv = (nv / kStages) & 1u;
                mbar_wait(&k_full[sk], pk);
                mbar_wait(&v_full[sv], pv);
                turn_wait(c);
                wgmma_fence();
                gemm_qk(s, q_addr, sbase + kOffK + sk * kTileBytes);
                wgmma_commit();
                gemm_pv(o, p, sbase + kOffV + sv * kTileBytes);
                wgmma_commit();
                turn_pass(c);
                if constexpr (kOverlap) {
                    wgmma_wait<1>();  // S_j is ready; the P V GEMM may still run
                } else {
                    wgmma_wait<0>();
                }
                wgmma_fence_operands(s);
                if (lane == 0) mbar_arrive(&k_empty[sk]);
                if (need_mask && j == T - 1) mask_block(s, j, prm.seq, qrow0, lane);
                softmax_step<false>(s, m, l, corr);
                wgmma_wait<0>();  // O now holds the sum over blocks < j at the old max
                wgmma_fence_operands(o);
                if (lane == 0) mbar_arrive(&v_empty[sv]);
                scale_rows(o, corr);
                pack_p(s, p);  // the state carry: P_j becomes the pending P
            }

            // Tail: O += P_{T-1} V_{T-1}.
            {
                const uint32_t nv = n + T - 1;
                const uint32_t sv = nv % kStages, pv = (nv / kStages) & 1u;
                mbar_wait(&v_full[sv], pv);
                turn_wait(c);
                wgmma_fence();
                gemm_pv(o, p, sbase + kOffV + sv * kTileBytes);
                wgmma_commit();
                turn_pass(c);
                wgmma_wait<0>();
                wgmma_fence_operands(o);
                if (lane == 0) mbar_arrive(&v_empty[sv]);
            }
            n += T;

            // Epilogue: finish the row sums over the 4 lanes of a row, normalise, stage, store.
            float inv[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
                l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
                inv[h] = 1.f / l[h];
            }
            scale_rows(o, inv);
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const uint32_t base = q_addr + hf * kHalfBytes;  // this warpgroup's 64 rows of half hf
                const uint32_t row = 16 * warp + 8 * ((lane / 8) % 2) + lane % 8;
#pragma unroll
                for (int pc = 0; pc < 4; ++pc) {
                    const int jb = 8 * hf + 2 * pc;  // 8-column block of the accumulator
                    const uint32_t addr = base + swizzle128_offset(row, 2 * pc + lane / 16);
                    stmatrix_x4(addr, pack_bf16x2(o[4 * jb], o[4 * jb + 1]), pack_bf16x2(o[4 * jb + 2], o[4 * jb + 3]),
                                pack_bf16x2(o[4 * jb + 4], o[4 * jb + 5]), pack_bf16x2(o[4 * jb + 6], o[4 * jb + 7]));
                }
            }
            fence_proxy_async_shared();
            named_barrier_sync(kBarEpi0 + c, 128);
            if (tid == 0) {
                const int orow = tile.qb * kBM + static_cast<int>(c) * 64;
                tma_store(&tmO, smem + kOffQ + c * kWgRowsBytes, 0, orow, tile.bh);
                tma_store(&tmO, smem + kOffQ + kHalfBytes + c * kWgRowsBytes, 64, orow, tile.bh);
                tma_store_commit();
                tma_store_wait_read<0>();  // the Q buffer may be refilled once the store has read it
                mbar_arrive(q_empty);
            }
            if ((lane & 3) == 0) {
                float* lse = prm.lse + static_cast<size_t>(tile.bh) * prm.seq;
                if (qrow0 < prm.seq) lse[qrow0] = m[0] * kScale + __logf(l[0]);
                if (qrow0 + 8 < prm.seq) lse[qrow0 + 8] = m[1] * kScale + __logf(l[1]);
            }
        }
        if (kPingPong && c == 0) named_barrier_sync(kBarTurn0 + 0, 256);  // the arrival left from the start
        if (tid == 0) tma_store_wait<0>();
    }
}

// ------------------------------------------------------------------------------------ host side

void check_qkvo(const tvm::ffi::TensorView& t, const char* name) {
    const DLDataType dt = t.dtype();
    if (t.ndim() != 4) TVM_FFI_THROW(ValueError) << name << " must be 4-D [B, H, S, D], got " << t.ndim() << " dims";
    if (dt.code != kDLBfloat || dt.bits != 16 || dt.lanes != 1) TVM_FFI_THROW(TypeError) << name << " must be bfloat16";
    if (t.device().device_type != kDLCUDA) TVM_FFI_THROW(ValueError) << name << " must be on a CUDA device";
    if (!t.IsContiguous()) TVM_FFI_THROW(ValueError) << name << " must be contiguous";
}

int sm_count(int dev) {
    static int cached_dev = -1, cached = 0;
    if (cached_dev != dev) {
        if (cudaDeviceGetAttribute(&cached, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || cached <= 0)
            cached = 132;
        cached_dev = dev;
    }
    return cached;
}

void run(tvm::ffi::TensorView Q, tvm::ffi::TensorView K, tvm::ffi::TensorView V, tvm::ffi::TensorView O,
         tvm::ffi::TensorView LSE) {
    check_qkvo(Q, "Q");
    check_qkvo(K, "K");
    check_qkvo(V, "V");
    check_qkvo(O, "O");
    const int64_t B = Q.size(0), H = Q.size(1), S = Q.size(2), D = Q.size(3);
    if (D != kD) TVM_FFI_THROW(ValueError) << "head dimension must be 128, got " << D;
    const tvm::ffi::TensorView* others[3] = {&K, &V, &O};
    const char* names[3] = {"K", "V", "O"};
    for (int i = 0; i < 3; ++i) {
        for (int d = 0; d < 4; ++d) {
            if (others[i]->size(d) != Q.size(d))
                TVM_FFI_THROW(ValueError) << names[i] << " must have the shape of Q [" << B << ", " << H << ", " << S
                                          << ", " << D << "]";
        }
    }
    const DLDataType ldt = LSE.dtype();
    if (LSE.ndim() != 3 || LSE.size(0) != B || LSE.size(1) != H || LSE.size(2) != S)
        TVM_FFI_THROW(ValueError) << "LSE must be [" << B << ", " << H << ", " << S << "]";
    if (ldt.code != kDLFloat || ldt.bits != 32 || ldt.lanes != 1) TVM_FFI_THROW(TypeError) << "LSE must be float32";
    if (!LSE.IsContiguous() || LSE.device().device_type != kDLCUDA)
        TVM_FFI_THROW(ValueError) << "LSE must be a contiguous CUDA tensor";
    if (B == 0 || H == 0 || S == 0) return;
    const int64_t BH = B * H;
    if (S > (1 << 30) || BH > (1 << 30)) TVM_FFI_THROW(ValueError) << "tensor too large";

    const int dev = Q.device().device_id;
    cudaSetDevice(dev);
    cudaStream_t stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, dev));

    // [B*H][S][128] bf16: dims innermost first, byte strides of dims 1 and 2.
    const uint64_t dims[3] = {static_cast<uint64_t>(kD), static_cast<uint64_t>(S), static_cast<uint64_t>(BH)};
    const uint64_t strides[2] = {static_cast<uint64_t>(kD) * 2, static_cast<uint64_t>(S) * kD * 2};
    const uint32_t box_in[3] = {64, 128, 1};
    const uint32_t box_out[3] = {64, 64, 1};
    CUtensorMap tmQ, tmK, tmV, tmO;
    std::string err = make_tensor_map_bf16(&tmQ, Q.data_ptr(), 3, dims, strides, box_in, Swizzle::k128B);
    if (err.empty()) err = make_tensor_map_bf16(&tmK, K.data_ptr(), 3, dims, strides, box_in, Swizzle::k128B);
    if (err.empty()) err = make_tensor_map_bf16(&tmV, V.data_ptr(), 3, dims, strides, box_in, Swizzle::k128B);
    if (err.empty()) err = make_tensor_map_bf16(&tmO, O.data_ptr(), 3, dims, strides, box_out, Swizzle::k128B);
    if (!err.empty()) TVM_FFI_THROW(RuntimeError) << "tensor map: " << err;

    Params prm;
    prm.lse = static_cast<float*>(LSE.data_ptr());
    prm.seq = static_cast<int>(S);
    prm.bh_total = static_cast<int>(BH);
    prm.nqb = static_cast<int>((S + kBM - 1) / kBM);
    prm.nkb = static_cast<int>((S + kBN - 1) / kBN);
    const int64_t ntiles = static_cast<int64_t>(prm.nqb) * BH;
    if (ntiles > INT32_MAX) TVM_FFI_THROW(ValueError) << "too many tiles";
    prm.ntiles = static_cast<int>(ntiles);
    const int grid = kPersistent ? static_cast<int>(ntiles < sm_count(dev) ? ntiles : sm_count(dev))
                                 : prm.ntiles;

    static bool attr_set = false;
    if (!attr_set) {
        cudaError_t e = cudaFuncSetAttribute(mha_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        if (e != cudaSuccess) TVM_FFI_THROW(RuntimeError) << "cudaFuncSetAttribute: " << cudaGetErrorString(e);
        attr_set = true;
    }
    mha_fwd_kernel<<<grid, kThreads, kSmemBytes, stream>>>(tmQ, tmK, tmV, tmO, prm);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) TVM_FFI_THROW(RuntimeError) << "attention launch failed: " << cudaGetErrorString(e);
}

}  // namespace mha

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, mha::run);
