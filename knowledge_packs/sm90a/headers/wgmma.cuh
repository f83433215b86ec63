// wgmma.cuh - warpgroup-level asynchronous MMA (wgmma) for bf16 inputs, fp32 accumulators, sm_90a.
//
// wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 computes D[64 x N] (+)= A[64 x 16] * B[16 x N]
// for one warpgroup (4 consecutive warps, the first warp index divisible by 4, all 128 threads
// executing it together). A comes from shared memory (SS form, through a 64-bit matrix descriptor)
// or from registers (RS form, 4 x b32 per thread); B always comes from shared memory. D lives in
// N/2 fp32 registers per thread (layout: acc_row / acc_col below). N is a multiple of 8 up to 256;
// this header instantiates N = 64, 128, 256.
//
// The instruction is asynchronous. The required order per batch of MMAs is
//   wgmma_fence();                       // registers (D, and A in RS form) are ready to be read
//   wgmma_ss<N>(...) x k;                // issue; successive MMAs on the same D chain in hardware
//   wgmma_commit();                      // close a wgmma-group
//   wgmma_wait<G>();                     // until at most G groups are still running
// Until the wait that covers an MMA: do not read or write its D registers, do not change its A
// registers (RS), and do not overwrite the shared memory it reads. Shared memory written by ordinary
// stores must be fenced with fence_proxy_async_shared() before the MMA reads it (TMA-written data is
// already in the async proxy).
#pragma once

#include "common.cuh"

namespace sm90 {

// ------------------------------------------------------------------------------- fences, groups

// wgmma.fence.sync.aligned: orders this warpgroup's earlier register accesses (to accumulators and
// A fragments) before the following wgmma.mma_async. Needed before the first MMA of a batch and
// whenever those registers were touched since the last MMA.
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

// wgmma.commit_group.sync.aligned: all MMAs issued since the previous commit form one group.
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// wgmma.wait_group.sync.aligned N: wait until at most N committed groups of this warpgroup are pending.
// After wgmma_wait<0>() every accumulator is final and the operand smem may be reused.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Tell the compiler an accumulator array is being written asynchronously (keeps it from moving
// reads/writes of these registers across the fence/wait points).
template <int R>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---------------------------------------------------------------- shared-memory matrix descriptor
//
// 64-bit descriptor of one operand tile in shared memory:
//   bits  0-13  start address >> 4          (the tile's first byte; 16-byte aligned)
//   bits 16-29  leading-dimension byte offset (LBO) >> 4
//   bits 32-45  stride-dimension byte offset  (SBO) >> 4
//   bits 49-51  base offset (0 when the swizzle atoms start 1024/512/256-byte aligned, as here)
//   bits 62-63  swizzle: 0 none, 1 128B, 2 64B, 3 32B
// The tile is built of "core matrices" of 8 rows x 16 bytes (8 x 8 bf16). For a K-major operand
// (rows are M or N, the 16-byte chunks run along K): SBO = bytes between core matrices adjacent in
// M/N (the next 8 rows), LBO = bytes between core matrices adjacent in K. With a swizzle, rows are
// `span` bytes wide (32/64/128) and hold span/16 K-chunks; LBO is then not used for K-major tiles
// (set it to 1), and SBO = 8 * span (one 8-row swizzle atom).

enum class SmemSwizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

// Pack the fields above (byte offsets are given in bytes and stored >> 4).
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                   SmemSwizzle swizzle) {
    uint64_t d = 0;
    d |= static_cast<uint64_t>((smem_addr >> 4) & 0x3FFF);
    d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
    d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
    d |= static_cast<uint64_t>(static_cast<uint32_t>(swizzle)) << 62;
    return d;
}

// K-major bf16 tile written by TMA with the matching swizzle, rows of exactly one span:
//   128B: box {64, rows}  -> K-steps of 16 at +32 bytes: desc(k) = kmajor_desc(base + 32 * k)
//   64B : box {32, rows}  -> K-steps at +32 bytes (2 per row)
//   32B : box {16, rows}  -> one K-step per row
// `tile_addr` must point to the first row of an 8-row atom (atoms are 8 * span bytes, and for the
// swizzled modes the tile base must be aligned to 8 * span; 1024 bytes covers all three).
template <SmemSwizzle kSw>
__device__ __forceinline__ uint64_t kmajor_desc(uint32_t tile_addr) {
    static_assert(kSw != SmemSwizzle::kNone, "use make_smem_desc with explicit LBO/SBO for no swizzle");
    constexpr uint32_t span = kSw == SmemSwizzle::k128B ? 128 : (kSw == SmemSwizzle::k64B ? 64 : 32);
    return make_smem_desc(tile_addr, 16, 8 * span, kSw);
}

// Moving a descriptor along K inside a swizzled row: add bytes>>4 to the start-address field (the
// hardware applies the swizzle to the final address, so this is exact as long as it stays inside the
// row). Example: the k-th 16-wide slice of a 128B-swizzled bf16 tile is desc + 2 * k.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
    return desc + static_cast<uint64_t>(bytes >> 4);
}

// --------------------------------------------------------------------------- accumulator layout
//
// For m64nN with fp32 D, thread t of the warpgroup (warp w = t / 32, lane l = t % 32) holds N/2 values
// d[i]. Element d[i] sits at
//   row = 16 * w + l / 4 + 8 * ((i / 2) % 2)
//   col = 8 * (i / 4) + 2 * (l % 4) + (i % 2)
// i.e. per 8-column block j = i / 4: d[4j], d[4j+1] are row r, cols c, c+1 and d[4j+2], d[4j+3] are
// row r+8, the same cols. This is the m16n8 mma C layout repeated over N/8 blocks, and exactly the
// fragment an stmatrix .x4 (see matrix.cuh) takes for a 16 x 16 piece: registers
// {pack(d[4j], d[4j+1]), pack(d[4j+2], d[4j+3]), pack(d[4j+4], d[4j+5]), pack(d[4j+6], d[4j+7])}.
__device__ __forceinline__ int acc_row(int i, int thread_in_wg) {
    return 16 * (thread_in_wg / 32) + (thread_in_wg % 32) / 4 + 8 * ((i / 2) % 2);
}
__device__ __forceinline__ int acc_col(int i, int thread_in_wg) {
    return 8 * (i / 4) + 2 * (thread_in_wg % 4) + (i % 2);
}

// Register-A fragment (RS form) of a 64 x 16 bf16 A slice, per thread (w, l as above), 4 x b32 each
// holding 2 bf16 (lower k in the low half):
//   a[0]: row 16w + l/4,     k = 2(l%4), +1        a[1]: row 16w + l/4 + 8, same k
//   a[2]: row 16w + l/4,     k = 8 + 2(l%4), +1    a[3]: row 16w + l/4 + 8, same k
// which is what ldmatrix .x4 returns for the four 8x8 blocks (rows 0-7|8-15) x (k 0-7|8-15) when lanes
// 0-7, 8-15, 16-23, 24-31 give the row addresses of blocks (r0-7,k0-7), (r8-15,k0-7), (r0-7,k8-15),
// (r8-15,k8-15). An fp32 accumulator of one MMA converts to the A fragment of the next (FlashAttention
// P = softmax(S)): a[0] = pack(d[8j], d[8j+1]), a[1] = pack(d[8j+2], d[8j+3]), a[2] = pack(d[8j+4], d[8j+5]),
// a[3] = pack(d[8j+6], d[8j+7]) for the k-slice 16j..16j+15.

// ------------------------------------------------------------------------------- the MMAs
//
// wgmma_ss<N>(d, descA, descB, scale_d): D = A*B + (scale_d ? D : 0), A and B from shared memory.
// wgmma_rs<N>(d, a, descB, scale_d):     the same with A from registers.
// kTransA / kTransB = 0 means K-major operands (A rows along M with K contiguous; B rows along N
// with K contiguous, i.e. C = A * B^T for row-major A[M,K], B[N,K]); 1 means MN-major (transposed,
// allowed for 16-bit types only).

#define SM90_ACC8(i) "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                     "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

template <int N, int kTransA, int kTransB>
struct WgmmaSS;
template <int N, int kTransB>
struct WgmmaRS;

template <int kTransA, int kTransB>
struct WgmmaSS<64, kTransA, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[32], uint64_t da, uint64_t db, uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31 "
        "}, %32, %33, p, 1, 1, %35, %36;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24)
        : "l"(da), "l"(db), "r"(scale_d), "n"(kTransA), "n"(kTransB));
    }
};

template <int kTransB>
struct WgmmaRS<64, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                               uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %37, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31 "
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
    }
};

template <int kTransA, int kTransB>
struct WgmmaSS<128, kTransA, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[64], uint64_t da, uint64_t db, uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "
        "}, %64, %65, p, 1, 1, %67, %68;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24), SM90_ACC8(32), SM90_ACC8(40), SM90_ACC8(48), SM90_ACC8(56)
        : "l"(da), "l"(db), "r"(scale_d), "n"(kTransA), "n"(kTransB));
    }
};

template <int kTransB>
struct WgmmaRS<128, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                               uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %69, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24), SM90_ACC8(32), SM90_ACC8(40), SM90_ACC8(48), SM90_ACC8(56)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
    }
};

template <int kTransA, int kTransB>
struct WgmmaSS<256, kTransA, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[128], uint64_t da, uint64_t db, uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %130, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127 "
        "}, %128, %129, p, 1, 1, %131, %132;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24), SM90_ACC8(32), SM90_ACC8(40), SM90_ACC8(48), SM90_ACC8(56), SM90_ACC8(64), SM90_ACC8(72), SM90_ACC8(80), SM90_ACC8(88), SM90_ACC8(96), SM90_ACC8(104), SM90_ACC8(112), SM90_ACC8(120)
        : "l"(da), "l"(db), "r"(scale_d), "n"(kTransA), "n"(kTransB));
    }
};

template <int kTransB>
struct WgmmaRS<256, kTransB> {
    __device__ __forceinline__ static void run(float (&d)[128], const uint32_t (&a)[4], uint64_t db,
                                               uint32_t scale_d) {
        asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %133, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127 "
        "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n\t}"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24), SM90_ACC8(32), SM90_ACC8(40), SM90_ACC8(48), SM90_ACC8(56), SM90_ACC8(64), SM90_ACC8(72), SM90_ACC8(80), SM90_ACC8(88), SM90_ACC8(96), SM90_ACC8(104), SM90_ACC8(112), SM90_ACC8(120)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
    }
};

#undef SM90_ACC8

// D[64 x N] = A(smem) * B(smem) + (scale_d ? D : 0); N in {64, 128, 256}.
template <int N, int kTransA = 0, int kTransB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d) {
    WgmmaSS<N, kTransA, kTransB>::run(d, desc_a, desc_b, scale_d ? 1u : 0u);
}

// D[64 x N] = A(registers, 4 x b32 per thread) * B(smem) + (scale_d ? D : 0).
template <int N, int kTransB = 0>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, bool scale_d) {
    WgmmaRS<N, kTransB>::run(d, a, desc_b, scale_d ? 1u : 0u);
}

}  // namespace sm90
