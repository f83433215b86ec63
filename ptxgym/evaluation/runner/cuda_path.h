// The runner's GPU path: the CUDA driver API, loaded at run time (PTXGYM_RUNNER_CUDA).
//
// The driver is opened with dlopen the first time a guard-page blob is attached (the exact file the
// trusted side names with --libcuda, which the jail allows), so a CPU-only run never maps it. Every entry
// point is resolved by the name cuda.h maps it to (cuMemAlloc -> cuMemAlloc_v2, ...), which is what a
// direct call would bind.
//
// What it does, mirroring ptxgym/evaluation/vmm.py (MappedBlob) and the Python worker's calls:
//  * GpuBlob: import each run's POSIX fd (cuMemImportFromShareableHandle), reserve the blob's address
//    range, map every run at its offset and give the device read-write access; holes stay unmapped;
//  * Device: the primary context (the one the candidate's cudart uses) made current, its id
//    (cuCtxGetId) for the lost-context check, a non-blocking stream installed as TVM-FFI's current
//    stream (TVMFFIEnvSetStream), three timing events, the L2-flush buffer and a 4-byte scratch word
//    (the no-op subject memsets it: one GPU activity, as the worker's one-element add).
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
// Every driver function the runner uses (name as written in cuda.h); the symbol looked up is the
// macro-expanded name, so versioned entry points match cuda.h.
#define PTXR_CUDA_FUNCS(X)                                                                            \
  X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxGetCurrent)         \
  X(cuCtxGetId) X(cuCtxSynchronize) X(cuCtxSetLimit) X(cuCtxResetPersistingL2Cache) X(cuGetErrorName) \
  X(cuGetErrorString) X(cuMemImportFromShareableHandle) X(cuMemAddressReserve) X(cuMemMap)           \
  X(cuMemSetAccess) X(cuMemUnmap) X(cuMemAddressFree) X(cuMemRelease) X(cuMemAlloc) X(cuMemFree)     \
  X(cuMemsetD8Async) X(cuStreamCreate) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize)       \
  X(cuEventElapsedTime)

class Cuda {
 public:
#define PTXR_FIELD(name) decltype(&::name) name##_ = nullptr;
  PTXR_CUDA_FUNCS(PTXR_FIELD)
#undef PTXR_FIELD

  // Open the driver at `path` and resolve every entry point; throws naming the first one missing.
  void open(const std::string& path) {
    if (lib_) return;
    lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!lib_) throw std::runtime_error("cannot open " + path + ": " + dlerror());
#define PTXR_RESOLVE(name)                                                                          \
  name##_ = reinterpret_cast<decltype(name##_)>(dlsym(lib_, PTXR_STR(name)));                       \
  if (!name##_) throw std::runtime_error(path + " lacks " PTXR_STR(name));
    PTXR_CUDA_FUNCS(PTXR_RESOLVE)
#undef PTXR_RESOLVE
  }
  bool opened() const { return lib_ != nullptr; }

  // Throws "<call> failed: <CUDA error name>" unless the result is CUDA_SUCCESS.
  void check(CUresult r, const char* call) const {
    if (r == CUDA_SUCCESS) return;
    throw std::runtime_error(std::string(call) + " failed: " + name(r));
  }
  std::string name(CUresult r) const {
    const char* text = nullptr;
    if (cuGetErrorName_) cuGetErrorName_(r, &text);
    return text ? text : std::to_string(int(r));
  }
  // '' if the current context synchronises cleanly, else "<error name>: <error text>" (the sticky error).
  std::string sticky_error() const {
    if (!lib_) return "";
    CUresult r = cuCtxSynchronize_();
    if (r == CUDA_SUCCESS) return "";
    const char* text = nullptr;
    cuGetErrorString_(r, &text);
    return name(r) + ": " + (text ? text : "");
  }
  // The id of the current context, or -1 if there is none or it cannot be read.
  long long context_id() const {
    if (!lib_) return -1;
    CUcontext ctx = nullptr;
    unsigned long long id = 0;
    if (cuCtxGetCurrent_(&ctx) != CUDA_SUCCESS || !ctx) return -1;
    if (cuCtxGetId_(ctx, &id) != CUDA_SUCCESS) return -1;
    return static_cast<long long>(id);
  }

 private:
  void* lib_ = nullptr;
};

// The device side of one runner: context, stream, events, L2-flush buffer.
class Device {
 public:
  Device(Cuda& cu, int device) : cu_(cu), device_(device) {
    cu_.check(cu_.cuInit_(0), "cuInit");
    CUdevice dev;
    cu_.check(cu_.cuDeviceGet_(&dev, device), "cuDeviceGet");
    cu_.check(cu_.cuDevicePrimaryCtxRetain_(&ctx_, dev), "cuDevicePrimaryCtxRetain");
    cu_.check(cu_.cuCtxSetCurrent_(ctx_), "cuCtxSetCurrent");
    context_id_ = cu_.context_id();
    cu_.check(cu_.cuStreamCreate_(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    for (CUevent& ev : events_) cu_.check(cu_.cuEventCreate_(&ev, CU_EVENT_DEFAULT), "cuEventCreate");
    cu_.check(cu_.cuMemAlloc_(&word_, 4), "cuMemAlloc (scratch word)");
    if (TVMFFIEnvSetStream(kDLCUDA, device, stream_, nullptr) != 0)
      throw std::runtime_error("TVMFFIEnvSetStream failed");
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int device() const { return device_; }
  long long context_id() const { return context_id_; }
  CUcontext context() const { return ctx_; }

  // (Re)allocate the L2-flush buffer; returns its size.
  size_t set_flush(size_t bytes) {
    if (flush_) cu_.cuMemFree_(flush_);
    flush_ = 0;
    flush_bytes_ = 0;
    if (bytes) cu_.check(cu_.cuMemAlloc_(&flush_, bytes), "cuMemAlloc (L2 flush buffer)");
    flush_bytes_ = bytes;
    return bytes;
  }

  void sync() const { cu_.check(cu_.cuCtxSynchronize_(), "cuCtxSynchronize"); }

  // Zero the persisting-L2 limit (as the worker's cudaDeviceSetLimit(PersistingL2CacheSize, 0)).
  void zero_persisting_limit() const {
    cu_.check(cu_.cuCtxSetLimit_(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0), "cuCtxSetLimit");
  }

  // Flush the L2 (memset of the flush buffer on the stream) and reset persisting lines.
  void flush_l2() const {
    if (flush_) cu_.check(cu_.cuMemsetD8Async_(flush_, 0, flush_bytes_, stream_), "cuMemsetD8Async (flush)");
    cu_.check(cu_.cuCtxResetPersistingL2Cache_(), "cuCtxResetPersistingL2Cache");
  }

  // The no-op subject: one memset of the scratch word on the stream, then `busy` memsets of the L2-flush
  // buffer (the matched calibration: a trusted subject that keeps the GPU busy like a candidate).
  void noop(int64_t busy = 0) const {
    cu_.check(cu_.cuMemsetD8Async_(word_, 1, 4, stream_), "cuMemsetD8Async (no-op)");
    for (int64_t i = 0; i < busy; ++i)
      cu_.check(cu_.cuMemsetD8Async_(flush_, 1, flush_bytes_, stream_), "cuMemsetD8Async (busy no-op)");
  }
  bool has_flush() const { return flush_ != 0; }

  void record(int k) const { cu_.check(cu_.cuEventRecord_(events_[k], stream_), "cuEventRecord"); }
  void wait(int k) const { cu_.check(cu_.cuEventSynchronize_(events_[k]), "cuEventSynchronize"); }
  float elapsed(int a, int b) const {
    float ms = 0.0f;
    cu_.check(cu_.cuEventElapsedTime_(&ms, events_[a], events_[b]), "cuEventElapsedTime");
    return ms;
  }

 private:
  Cuda& cu_;
  int device_;
  CUcontext ctx_ = nullptr;
  long long context_id_ = -1;
  CUstream stream_ = nullptr;
  CUevent events_[3] = {nullptr, nullptr, nullptr};
  CUdeviceptr word_ = 0, flush_ = 0;
  size_t flush_bytes_ = 0;
};

// One process's mapping of a guard-page blob.
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
  }

  char* base() const { return reinterpret_cast<char*>(static_cast<uintptr_t>(base_)); }

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
  CUdeviceptr base_ = 0;
  size_t total_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
  std::vector<std::pair<CUdeviceptr, size_t>> mapped_;
};

}  // namespace ptxrunner

#endif  // PTXGYM_RUNNER_CUDA
