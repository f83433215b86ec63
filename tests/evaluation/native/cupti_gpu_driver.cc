// GPU driver for the runner's CUPTI path (ptxgym/evaluation/runner/cupti_path.h), as the runner will call
// it: start, then a probe trial (a memset), then the test cubin is loaded (so the module census sees it),
// a trial of three timed windows each launching simt_loop and hgmma_loop, and one counted call of each
// kernel under the SASS metrics, then one call of each under the range profiler's hardware counters
// (cupti_range.h), as the runner's hardware-counted call. Prints one JSON object, which
// tests/evaluation/test_runner_cupti_gpu.py checks.
//   cupti_gpu_driver CUBIN SIMT_TRIPS HGMMA_TRIPS
// The CUDA driver is opened with dlopen (no libcuda to link against on a build host without a GPU).
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "cupti_path.h"

namespace {

#define DRV_STR2(x) #x
#define DRV_STR(x) DRV_STR2(x)
#define DRV_FUNCS(X)                                                                                    \
  X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxSynchronize)          \
  X(cuModuleLoadData) X(cuModuleGetFunction) X(cuMemAlloc) X(cuMemsetD8) X(cuLaunchKernel)             \
  X(cuGetErrorName)

struct Driver {
#define DRV_FIELD(name) decltype(&::name) name##_ = nullptr;
  DRV_FUNCS(DRV_FIELD)
#undef DRV_FIELD
  Driver() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) throw std::runtime_error(std::string("cannot open libcuda.so.1: ") + dlerror());
#define DRV_RESOLVE(name)                                                                        \
  name##_ = reinterpret_cast<decltype(name##_)>(dlsym(lib, DRV_STR(name)));                      \
  if (!name##_) throw std::runtime_error("libcuda.so.1 lacks " DRV_STR(name));
    DRV_FUNCS(DRV_RESOLVE)
#undef DRV_RESOLVE
  }
  void check(CUresult r, const char* call) const {
    if (r == CUDA_SUCCESS) return;
    const char* name = nullptr;
    cuGetErrorName_(r, &name);
    throw std::runtime_error(std::string(call) + " failed: " + (name ? name : std::to_string(r)));
  }
};

std::string quoted(const std::string& s) { return ptxrunner::cupti::json_string(s); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: cupti_gpu_driver CUBIN SIMT_TRIPS HGMMA_TRIPS\n";
    return 2;
  }
  namespace cupti = ptxrunner::cupti;
  try {
    Driver cu;
    cu.check(cu.cuInit_(0), "cuInit");
    CUdevice dev;
    cu.check(cu.cuDeviceGet_(&dev, 0), "cuDeviceGet");
    CUcontext ctx;
    cu.check(cu.cuDevicePrimaryCtxRetain_(&ctx, dev), "cuDevicePrimaryCtxRetain");
    cu.check(cu.cuCtxSetCurrent_(ctx), "cuCtxSetCurrent");
    std::string started = cupti::start(true);
    CUdeviceptr out;
    cu.check(cu.cuMemAlloc_(&out, 1 << 20), "cuMemAlloc");

    cupti::begin();  // the probe the runner takes before loading a candidate
    cu.check(cu.cuCtxSynchronize_(), "cuCtxSynchronize");
    uint64_t t0 = cupti::now();
    cu.check(cu.cuMemsetD8_(out, 0, 1 << 20), "cuMemsetD8");
    cu.check(cu.cuCtxSynchronize_(), "cuCtxSynchronize");
    cupti::window(0, t0, cupti::now());
    std::string probe;
    std::string probe_error = cupti::end_json(&probe);

    std::ifstream in(argv[1], std::ios::binary);
    std::string image((std::istreambuf_iterator<char>(in)), {});
    CUmodule mod;
    cu.check(cu.cuModuleLoadData_(&mod, image.data()), "cuModuleLoadData");
    CUfunction simt, hgmma;
    cu.check(cu.cuModuleGetFunction_(&simt, mod, "simt_loop"), "cuModuleGetFunction(simt_loop)");
    cu.check(cu.cuModuleGetFunction_(&hgmma, mod, "hgmma_loop"), "cuModuleGetFunction(hgmma_loop)");
    int simt_trips = std::stoi(argv[2]), hgmma_trips = std::stoi(argv[3]);
    void* simt_args[] = {&out, &simt_trips};
    void* hgmma_args[] = {&out, &hgmma_trips};
    auto launch_simt = [&] {  // 4 blocks of 128 threads: 16 warps
      CUresult r = cu.cuLaunchKernel_(simt, 4, 1, 1, 128, 1, 1, 0, nullptr, simt_args, nullptr);
      cu.check(r, "launching simt_loop");
    };
    auto launch_hgmma = [&] {  // one warpgroup: 4 warps
      CUresult r = cu.cuLaunchKernel_(hgmma, 1, 1, 1, 128, 1, 1, 0, nullptr, hgmma_args, nullptr);
      cu.check(r, "launching hgmma_loop");
    };

    cupti::begin();
    for (int64_t seq = 1; seq <= 3; ++seq) {
      cu.check(cu.cuCtxSynchronize_(), "cuCtxSynchronize");
      uint64_t lo = cupti::now();
      launch_simt();
      launch_hgmma();
      cu.check(cu.cuCtxSynchronize_(), "cuCtxSynchronize");
      cupti::window(seq, lo, cupti::now());
      cu.check(cu.cuMemsetD8_(out, 0, 1 << 20), "cuMemsetD8");  // between windows: in no span
      cu.check(cu.cuCtxSynchronize_(), "cuCtxSynchronize");
    }
    std::string spans;
    std::string spans_error = cupti::end_json(&spans);

    std::string counted[2], count_errors[2];
    bool ran[2] = {false, false};
    const std::function<void()> launches[2] = {launch_simt, launch_hgmma};
    for (int k = 0; k < 2; ++k) {
      auto run = [&] {
        launches[k]();
        cu.check(cu.cuCtxSynchronize_(), "cuCtxSynchronize");
      };
      count_errors[k] = cupti::count_json(run, 0, 200000, &counted[k], &ran[k]);
    }
    std::string hw[2], hw_errors[2];
    bool hw_ran[2] = {false, false};
    for (int k = 0; k < 2; ++k) {
      auto run = [&] {
        launches[k]();
        cu.check(cu.cuCtxSynchronize_(), "cuCtxSynchronize");
      };
      hw_errors[k] = cupti::hw_count_json(run, ctx, 0, &hw[k], &hw_ran[k]);
    }
    std::cout << "{\"start\":" << quoted(started) << ",\"probe_error\":" << quoted(probe_error)
              << ",\"probe\":" << (probe.empty() ? "null" : probe)
              << ",\"spans_error\":" << quoted(spans_error)
              << ",\"spans\":" << (spans.empty() ? "null" : spans);
    const char* names[2] = {"simt", "hgmma"};
    for (int k = 0; k < 2; ++k)
      std::cout << ",\"" << names[k] << "\":{\"error\":" << quoted(count_errors[k])
                << ",\"ran\":" << (ran[k] ? "true" : "false")
                << ",\"rows\":" << (counted[k].empty() ? "null" : counted[k]) << "}";
    for (int k = 0; k < 2; ++k)
      std::cout << ",\"hw_" << names[k] << "\":{\"error\":" << quoted(hw_errors[k])
                << ",\"ran\":" << (hw_ran[k] ? "true" : "false")
                << ",\"counts\":" << (hw[k].empty() ? "null" : hw[k]) << "}";
    std::cout << "}\n";
  } catch (const std::exception& exc) {
    std::cerr << exc.what() << "\n";
    return 1;
  }
  return 0;
}
