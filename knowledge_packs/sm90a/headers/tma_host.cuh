// tma_host.cuh - host-side creation of TMA tensor maps (CUtensorMap) for bf16 tensors.
//
// cuTensorMapEncodeTiled is a driver-API function, called by name: the build links -lcuda. (Fetching it
// through cudaGetDriverEntryPoint* or cuGetProcAddress is not allowed: those hand out any driver function,
// module loading included, so the artifact check rejects them.)
//
// Rules the encoder enforces (and that these helpers check first, with a readable message):
//  * rank 1..5; dims[0] is the innermost (contiguous) dimension; every dim in [1, 2^32];
//  * the global address is 16-byte aligned; strides (bytes, for dims 1..rank-1) are multiples of 16
//    and below 2^40;
//  * each box dim is in [1, 256]; with a swizzle mode, box[0] * sizeof(elem) must not exceed the
//    swizzle span (32, 64 or 128 bytes) - e.g. 64 bf16 for the 128B swizzle;
//  * the smem side then holds the box densely, innermost dim fastest, with the swizzle applied to
//    16-byte chunks inside each span-sized row (see contract.md for the exact pattern).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace sm90 {

enum class Swizzle { kNone, k32B, k64B, k128B };

// Bytes of one swizzle row (the "span"): 0 means no limit beyond the box rules.
inline uint32_t swizzle_span_bytes(Swizzle s) {
    switch (s) {
        case Swizzle::k32B: return 32;
        case Swizzle::k64B: return 64;
        case Swizzle::k128B: return 128;
        default: return 0;
    }
}

inline CUtensorMapSwizzle to_cu_swizzle(Swizzle s) {
    switch (s) {
        case Swizzle::k32B: return CU_TENSOR_MAP_SWIZZLE_32B;
        case Swizzle::k64B: return CU_TENSOR_MAP_SWIZZLE_64B;
        case Swizzle::k128B: return CU_TENSOR_MAP_SWIZZLE_128B;
        default: return CU_TENSOR_MAP_SWIZZLE_NONE;
    }
}

// Encode a tiled bf16 tensor map of rank 1..5.
//   dims[i]        extent of dim i in elements, dims[0] innermost;
//   strides[i]     byte stride of dim i+1 (rank-1 entries; dim 0 is contiguous);
//   box[i]         box extent in elements for dim i.
// Returns "" on success, otherwise what is wrong (nothing is thrown).
inline std::string make_tensor_map_bf16(CUtensorMap* out, const void* base, uint32_t rank, const uint64_t* dims,
                                        const uint64_t* strides, const uint32_t* box, Swizzle swizzle,
                                        CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
    if (rank < 1 || rank > 5) return "tensor map rank must be 1..5, got " + std::to_string(rank);
    if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return "tensor map base address is not 16-byte aligned";
    for (uint32_t i = 0; i < rank; ++i) {
        if (dims[i] < 1 || dims[i] > (1ull << 32)) return "dim " + std::to_string(i) + " out of [1, 2^32]";
        if (box[i] < 1 || box[i] > 256) return "box dim " + std::to_string(i) + " out of [1, 256]";
        if (i + 1 < rank && (strides[i] % 16 != 0 || strides[i] >= (1ull << 40)))
            return "stride of dim " + std::to_string(i + 1) + " must be a multiple of 16 below 2^40";
    }
    const uint32_t span = swizzle_span_bytes(swizzle);
    if (span != 0 && box[0] * 2u > span)
        return "box[0] = " + std::to_string(box[0]) + " bf16 is wider than the " + std::to_string(span) +
               "-byte swizzle span";
    if ((box[0] * 2u) % 16 != 0) return "box[0] * 2 bytes must be a multiple of 16";
    cuuint64_t d[5], s[5];
    cuuint32_t b[5], e[5];
    for (uint32_t i = 0; i < rank; ++i) {
        d[i] = dims[i];
        b[i] = box[i];
        e[i] = 1;  // element strides: take every element of the box
        if (i + 1 < rank) s[i] = strides[i];
    }
    const CUresult r = cuTensorMapEncodeTiled(out, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base),
                                              d, s, b, e, CU_TENSOR_MAP_INTERLEAVE_NONE, to_cu_swizzle(swizzle),
                                              promo, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(r));
    return "";
}

// Row-major [rows, cols] bf16 matrix with a row pitch of `ld` elements; the box is box_rows x box_cols
// (box_cols along the contiguous dim). Coordinates in the kernel are then {col, row}.
inline std::string make_tensor_map_bf16_2d(CUtensorMap* out, const void* base, uint64_t rows, uint64_t cols,
                                           uint64_t ld, uint32_t box_rows, uint32_t box_cols, Swizzle swizzle) {
    const uint64_t dims[2] = {cols, rows};
    const uint64_t strides[1] = {ld * 2};
    const uint32_t box[2] = {box_cols, box_rows};
    return make_tensor_map_bf16(out, base, 2, dims, strides, box, swizzle);
}

}  // namespace sm90
