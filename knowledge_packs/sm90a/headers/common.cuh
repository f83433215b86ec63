// common.cuh - small building blocks shared by the other sm_90a wrappers.
//
// Part of the ptxgym Hopper knowledge pack. Every wrapper is a __device__ __forceinline__ function
// around one inline-PTX instruction (or a short fixed sequence), in namespace sm90. Build with
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a
// ("sm_90a", not "sm_90": wgmma and setmaxnreg exist only on the architecture-specific target).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>

namespace sm90 {

// ---------------------------------------------------------------------------------- addresses

// Shared-memory instructions (mbarrier, cp.async.bulk, wgmma descriptors, ldmatrix/stmatrix) take a
// 32-bit address in the .shared::cta window, not a generic 64-bit pointer. This converts a generic
// pointer that points into this CTA's shared memory (a __shared__ variable or the dynamic buffer).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ------------------------------------------------------------------------------ thread indices

// Lane of the calling thread inside its warp (0..31), read from the %laneid special register.
__device__ __forceinline__ uint32_t lane_id() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
    return r;
}

// Warp index inside the CTA, made warp-uniform with a shuffle so the compiler can keep it in a
// uniform register (branches on it then do not diverge).
__device__ __forceinline__ uint32_t warp_id() {
    return __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
}

// Warpgroup index (4 consecutive warps = 128 threads) of a 1-D CTA. A warpgroup that issues wgmma
// must start at a warp index divisible by 4, which this numbering guarantees.
__device__ __forceinline__ uint32_t warpgroup_id() {
    return __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
}

// Index of the SM the CTA runs on (%smid). Only for diagnostics: it can change between launches.
__device__ __forceinline__ uint32_t sm_id() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}

// Nanoseconds from the global timer (%globaltimer). Coarse (about 1 us steps on some GPUs) but
// monotonic across SMs; used by the bounded waits to decide that a wait has hung.
__device__ __forceinline__ uint64_t global_timer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// elect.sync: exactly one active lane of the (full) warp gets true. Cheaper and clearer than
// "lane_id() == 0" when only some lanes are active; all 32 lanes must execute it.
__device__ __forceinline__ bool elect_one_sync() {
    uint32_t pred = 0;
    asm volatile(
        "{\n\t.reg .pred P;\n\t"
        "elect.sync _|P, 0xffffffff;\n\t"
        "selp.u32 %0, 1, 0, P;\n\t}"
        : "=r"(pred));
    return pred != 0;
}

// -------------------------------------------------------------------------------- conversions

// Two fp32 values -> one 32-bit register holding two bf16 (lo in bits 0..15, hi in 16..31), the
// packing ldmatrix/stmatrix fragments and wgmma register-A operands use. Round to nearest even.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// ex2.approx.ftz.f32: 2^x on the special-function unit (MUFU.EX2 in SASS), a few ulp, denormal results
// flushed to zero, exp2(-inf) = 0. Softmax kernels fold log2(e) into the score scale (one FFMA per
// element) and call this instead of expf, which costs an extra multiply and range handling.
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// ------------------------------------------------------------------------------------- fences

// fence.proxy.async.shared::cta: orders this thread's earlier generic-proxy accesses to shared memory
// (plain st.shared, stmatrix, ...) before later async-proxy accesses (TMA stores reading smem,
// wgmma reading smem operands). Every thread that wrote must execute it, then synchronise (bar.sync)
// with the thread that issues the async operation.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// fence.proxy.async.global: the same ordering for global memory (generic writes that a later TMA
// load of the same addresses must observe).
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;" ::: "memory");
}

// fence.proxy.async (all state spaces).
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async;" ::: "memory");
}

// fence.acq_rel.cluster: a memory fence at cluster scope (generic proxy).
__device__ __forceinline__ void fence_acq_rel_cluster() {
    asm volatile("fence.acq_rel.cluster;" ::: "memory");
}

// ------------------------------------------------------------------------------ named barriers

// bar.sync id, count: waits until `count` threads (a multiple of 32, whole warps) have reached named
// barrier `id` (0..15; 0 is the one __syncthreads uses). Lets a subset of warps, e.g. one
// warpgroup (count 128), synchronise without stopping the others.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// bar.arrive id, count: signals arrival at named barrier `id` without waiting (producer side of a
// producer/consumer hand-off between warps; the consumers use named_barrier_sync with the same count).
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t count) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// ------------------------------------------------------------------------- register allocation

// setmaxnreg.inc / .dec: change the per-thread register budget of the executing warpgroup at run
// time (warp-specialised kernels give the TMA producer few registers and the MMA consumers many).
// Rules: N is an immediate in [24, 256] and a multiple of 8; every thread of the warpgroup executes
// the same instruction (.sync.aligned); .inc blocks until the SM's register file has room, so the
// sum over resident warpgroups must fit in 64K registers per SM; the kernel needs a register cap at
// entry (__launch_bounds__(threads, 1) or -maxrregcount) or ptxas ignores it (warning C7508).
template <uint32_t N>
__device__ __forceinline__ void setmaxnreg_inc() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: N must be in [24,256], multiple of 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// The release direction: lower the warpgroup's budget to N (frees registers for setmaxnreg_inc).
template <uint32_t N>
__device__ __forceinline__ void setmaxnreg_dec() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: N must be in [24,256], multiple of 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// ---------------------------------------------------------------------------------- diagnostics

// Stop the whole grid now: the host then sees cudaErrorLaunchFailure ("unspecified launch failure")
// at the next synchronisation, and the CUDA context is unusable afterwards. Inline, no call: safe
// inside a wgmma pipeline.
__device__ __forceinline__ void trap_now() {
    asm volatile("trap;");
}

// Print a message with the CTA and thread that hit it (visible on stdout after the failing
// synchronisation), then trap. printf is a real function call, and ptxas (CUDA 13.0) serialises
// EVERY wgmma of a kernel that contains a call anywhere, even on another warpgroup's branch
// ("C7510 ... wgmma pipeline crossing function boundary"): a large slowdown. So use it only in kernels
// without wgmma (or in debug builds); trap_now() is the production choice.
__device__ __noinline__ inline void trap_with_message(const char* what, uint32_t a, uint32_t b) {
    printf("[sm90 trap] %s (a=%u b=%u) block=(%d,%d,%d) thread=%d\n", what, a, b,
           (int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, (int)threadIdx.x);
    trap_now();
}

}  // namespace sm90
