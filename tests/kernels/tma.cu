// Hopper TMA test solution (sm_90a): copies a 2-D bf16 tensor tile by tile. Each block loads one
// 64x64 tile with an inline-PTX cp.async.bulk.tensor (TMA) into shared memory, completion tracked by an
// mbarrier, then writes it out. The host side encodes the tensor map with the driver API
// (cuTensorMapEncodeTiled), so the build links -lcuda and the .so imports that driver symbol.
#include <cstdint>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/tvm_ffi.h>
#include <tvm/ffi/extra/c_env_api.h>

constexpr int kTileRows = 64, kTileCols = 64;
constexpr uint32_t kTileBytes = kTileRows * kTileCols * sizeof(__nv_bfloat16);

__global__ void __launch_bounds__(128) tma_tile_copy(const __grid_constant__ CUtensorMap src,
                                                     __nv_bfloat16* __restrict__ dst, int rows, int cols) {
  __shared__ alignas(128) __nv_bfloat16 tile[kTileRows * kTileCols];
  __shared__ alignas(8) uint64_t full;
  const int row0 = blockIdx.y * kTileRows, col0 = blockIdx.x * kTileCols;
  const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&full));
  const uint32_t dst_smem = static_cast<uint32_t>(__cvta_generic_to_shared(tile));

  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kTileBytes) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(dst_smem), "l"(&src), "r"(col0), "r"(row0), "r"(bar)
        : "memory");
  }
  __syncthreads();
  // Every thread waits for phase 0 of the barrier (the TMA bytes have landed).
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_FULL:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
      "@!done bra WAIT_FULL;\n"
      "}\n" ::"r"(bar)
      : "memory");

  for (int i = threadIdx.x; i < kTileRows * kTileCols; i += blockDim.x) {
    const int r = row0 + i / kTileCols, c = col0 + i % kTileCols;
    if (r < rows && c < cols) dst[static_cast<int64_t>(r) * cols + c] = tile[i];
  }
}

// dst[rows, cols] = src[rows, cols], both bf16, row-major; cols * 2 bytes must be a multiple of 16.
void run(tvm::ffi::TensorView src, tvm::ffi::TensorView dst) {
  const int rows = static_cast<int>(src.size(0)), cols = static_cast<int>(src.size(1));
  CUtensorMap map;
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * sizeof(__nv_bfloat16)};
  cuuint32_t box[2] = {kTileCols, kTileRows};
  cuuint32_t element_strides[2] = {1, 1};
  CUresult res = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, src.data_ptr(), dims, strides,
                                        box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                        CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    const char* what = nullptr;
    cuGetErrorString(res, &what);
    TVM_FFI_THROW(RuntimeError) << "cuTensorMapEncodeTiled failed: " << (what ? what : "unknown error");
  }
  auto dev = src.device();
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(dev.device_type, dev.device_id));
  dim3 grid((cols + kTileCols - 1) / kTileCols, (rows + kTileRows - 1) / kTileRows);
  tma_tile_copy<<<grid, 128, 0, stream>>>(map, static_cast<__nv_bfloat16*>(dst.data_ptr()), rows, cols);
  cudaError_t err = cudaGetLastError();
  TVM_FFI_ICHECK(err == cudaSuccess) << cudaGetErrorString(err);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
