// The runner's GPU path: the CUDA driver API, loaded at run time.
//
// UNTESTED ON A GPU: this file compiles on the CPU build host (cuda.h only; PTXGYM_RUNNER_CUDA) but
// has never run. The driver is opened with dlopen("libcuda.so.1") the first time a GPU blob is
// attached, so a CPU-only run never maps it. Every entry point is resolved by the name cuda.h maps it
// to (for example cuEventElapsedTime -> cuEventElapsedTime_v2), which is what a direct call would bind.
//
// What it does, mirroring ptxgym/evaluation/vmm.py (MappedBlob) and the Python worker's call timing:
//  * attach: retain the device's primary context (the one the candidate's cudart uses), import each
//    run's POSIX fd (cuMemImportFromShareableHandle), reserve the blob's address range, map every run
//    at its offset and give the device read-write access; the holes between runs stay unmapped;
//  * a non-blocking stream, installed as TVM-FFI's current stream for the device (TVMFFIEnvSetStream),
//    so a candidate that asks TVM-FFI for the stream launches on it;
//  * two events around each call on that stream (elapsed milliseconds), after a context sync.
#pragma once

#ifdef PTXGYM_RUNNER_CUDA

#include <cuda.h>
#include <dlfcn.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ptxrunner {

#define PTXR_STR2(x) #x
#define PTXR_STR(x) PTXR_STR2(x)
// Every driver function the runner uses: (name as written in cuda.h). The symbol looked up is the
// macro-expanded name, so versioned entry points (_v2, per-thread-stream variants) match cuda.h.
#define PTXR_CUDA_FUNCS(X)                                                                            \
  X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxSynchronize)        \
  X(cuGetErrorName) X(cuMemImportFromShareableHandle) X(cuMemAddressReserve) X(cuMemMap)             \
  X(cuMemSetAccess) X(cuMemUnmap) X(cuMemAddressFree) X(cuMemRelease) X(cuStreamCreate)              \
  X(cuEventCreate) X(cuEventRecord) X(cuEventElapsedTime)

class Cuda {
 public:
#define PTXR_FIELD(name) decltype(&::name) name##_ = nullptr;
  PTXR_CUDA_FUNCS(PTXR_FIELD)
#undef PTXR_FIELD

  // Open the driver and resolve every entry point; throws naming the first one missing.
  void open() {
    if (lib_) return;
    lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) throw std::runtime_error(std::string("cannot open libcuda.so.1: ") + dlerror());
#define PTXR_RESOLVE(name)                                                                          \
  name##_ = reinterpret_cast<decltype(name##_)>(dlsym(lib_, PTXR_STR(name)));                       \
  if (!name##_) throw std::runtime_error("libcuda.so.1 lacks " PTXR_STR(name));
    PTXR_CUDA_FUNCS(PTXR_RESOLVE)
#undef PTXR_RESOLVE
  }

  // Throws "<call> failed: <CUDA error name>" unless the result is CUDA_SUCCESS.
  void check(CUresult r, const char* call) const {
    if (r == CUDA_SUCCESS) return;
    const char* name = nullptr;
    if (cuGetErrorName_) cuGetErrorName_(r, &name);
    throw std::runtime_error(std::string(call) + " failed: " + (name ? name : std::to_string(r)));
  }

 private:
  void* lib_ = nullptr;
};

// One process's mapping of a guard-page blob plus the stream and events of its calls.
class GpuBlob {
 public:
  explicit GpuBlob(Cuda& cu) : cu_(cu) {}
  GpuBlob(const GpuBlob&) = delete;
  GpuBlob& operator=(const GpuBlob&) = delete;
  ~GpuBlob() { release(); }

  // Map runs[i] = (offset, size) of a `total`-byte range from fds[i]; the fds are closed here.
  void map(int device, std::vector<int> fds, size_t total, size_t page,
           const std::vector<std::pair<size_t, size_t>>& runs) {
    struct Closer {
      std::vector<int>& fds;
      ~Closer() {
        for (int fd : fds) close(fd);
      }
    } closer{fds};
    if (fds.size() != runs.size())
      throw std::runtime_error(std::to_string(runs.size()) + " run(s) need as many fds, got " +
                               std::to_string(fds.size()));
    cu_.open();
    cu_.check(cu_.cuInit_(0), "cuInit");
    CUdevice dev;
    cu_.check(cu_.cuDeviceGet_(&dev, device), "cuDeviceGet");
    cu_.check(cu_.cuDevicePrimaryCtxRetain_(&ctx_, dev), "cuDevicePrimaryCtxRetain");
    cu_.check(cu_.cuCtxSetCurrent_(ctx_), "cuCtxSetCurrent");
    device_ = device;
    for (int fd : fds) {
      CUmemGenericAllocationHandle h;
      void* shareable = reinterpret_cast<void*>(static_cast<uintptr_t>(fd));
      cu_.check(cu_.cuMemImportFromShareableHandle_(&h, shareable, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                "cuMemImportFromShareableHandle");
      handles_.push_back(h);
    }
    cu_.check(cu_.cuMemAddressReserve_(&base_, total, page, 0, 0), "cuMemAddressReserve");
    total_ = total;
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (size_t i = 0; i < runs.size(); ++i) {
      CUdeviceptr ptr = base_ + runs[i].first;
      cu_.check(cu_.cuMemMap_(ptr, runs[i].second, 0, handles_[i], 0), "cuMemMap");
      mapped_.emplace_back(ptr, runs[i].second);
      cu_.check(cu_.cuMemSetAccess_(ptr, runs[i].second, &access, 1), "cuMemSetAccess");
    }
    cu_.check(cu_.cuStreamCreate_(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    cu_.check(cu_.cuEventCreate_(&ev0_, CU_EVENT_DEFAULT), "cuEventCreate");
    cu_.check(cu_.cuEventCreate_(&ev1_, CU_EVENT_DEFAULT), "cuEventCreate");
    if (TVMFFIEnvSetStream(kDLCUDA, device, stream_, nullptr) != 0)
      throw std::runtime_error("TVMFFIEnvSetStream failed");
  }

  void* base() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(base_)); }
  int device() const { return device_; }

  // Run `call` between two events on the stream; returns the events' elapsed milliseconds.
  template <typename F>
  float timed(F&& call) {
    cu_.check(cu_.cuCtxSynchronize_(), "cuCtxSynchronize");
    cu_.check(cu_.cuEventRecord_(ev0_, stream_), "cuEventRecord");
    call();
    cu_.check(cu_.cuEventRecord_(ev1_, stream_), "cuEventRecord");
    cu_.check(cu_.cuCtxSynchronize_(), "cuCtxSynchronize (after the call)");
    float ms = 0.0f;
    cu_.check(cu_.cuEventElapsedTime_(&ms, ev0_, ev1_), "cuEventElapsedTime");
    return ms;
  }

  // Unmap, free the range and release the imported handles (errors ignored: best effort on teardown).
  void release() {
    for (auto& m : mapped_) cu_.cuMemUnmap_(m.first, m.second);
    mapped_.clear();
    if (base_) cu_.cuMemAddressFree_(base_, total_);
    base_ = 0;
    for (auto h : handles_) cu_.cuMemRelease_(h);
    handles_.clear();
  }

 private:
  Cuda& cu_;
  CUcontext ctx_ = nullptr;
  CUdeviceptr base_ = 0;
  size_t total_ = 0;
  int device_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
  std::vector<std::pair<CUdeviceptr, size_t>> mapped_;
  CUstream stream_ = nullptr;
  CUevent ev0_ = nullptr, ev1_ = nullptr;
};

}  // namespace ptxrunner

#endif  // PTXGYM_RUNNER_CUDA
