// The runner's hardware-counter call: one call under CUPTI's range profiler (user range, user replay),
// reading the metrics of hw_logic.h over every kernel the call ran. The counters are read by the GPU's
// performance monitors: no instruction is patched and, with one pass, nothing is replayed, so the call
// runs at its own speed (unlike the SASS-metrics call of cupti_path.h, which a kernel can notice).
//
// Every step is set up afresh for each such call and torn down after it (host object, config image,
// counter data, range profiler on the context): a few milliseconds of host work, no state that a failed
// call could leave behind for the next. Any CUPTI error, a config needing more than one pass, a dropped
// range or a value that is not a finite count is an error text (hw_logic.h's hw_count_error), never counts.
// A SASS-metrics configuration left by an earlier counted call is released first (cupti_path.h's
// sass_unset; the next counted call sets it up again): whether the two may be configured together is not
// documented. Compiled in with PTXGYM_RUNNER_CUPTI; cupti_path.h includes it at its end.
#pragma once

#ifdef PTXGYM_RUNNER_CUPTI

#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "cupti_path.h"
#include "hw_logic.h"

namespace ptxrunner::cupti {

namespace range_detail {

using detail::failed;  // "<call> failed: <CUPTI's message> (<code>)" (cupti_path.h)

// The context's counter-availability image, queried once before the runner's jail (hw_prepare): on the
// H200 the query fails inside it (CUPTI_ERROR_UNKNOWN) while the rest of the range profiler's steps are
// meant to run there. Empty image: not prepared (or the query failed: `error`), so setup() queries it.
struct Availability {
  CUcontext ctx = nullptr;
  std::vector<uint8_t> image;
  std::string error;
};

inline Availability& availability() {
  static Availability a;
  return a;
}

// cuptiProfilerGetCounterAvailability for ctx (size, then image); "" and *image set, or the error.
inline std::string query_availability(CUcontext ctx, std::vector<uint8_t>* image) {
  CUpti_Profiler_GetCounterAvailability_Params avail{};
  avail.structSize = CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE;
  avail.ctx = ctx;
  std::string err =
      failed(cuptiProfilerGetCounterAvailability(&avail), "cuptiProfilerGetCounterAvailability (size)");
  if (!err.empty()) return err;
  image->assign(avail.counterAvailabilityImageSize, 0);
  avail.pCounterAvailabilityImage = image->data();
  return failed(cuptiProfilerGetCounterAvailability(&avail), "cuptiProfilerGetCounterAvailability");
}

// The host object and the config image of hw_metrics() for the context's chip; "" on success.
struct Host {
  CUpti_Profiler_Host_Object* object = nullptr;
  std::vector<uint8_t> config;
  size_t passes = 0;
  std::string chip;  // kept alive with the host object, which was given its name
  ~Host() {
    if (!object) return;
    CUpti_Profiler_Host_Deinitialize_Params d{};
    d.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE;
    d.pHostObject = object;
    cuptiProfilerHostDeinitialize(&d);
  }

  std::string setup(CUcontext ctx, int device, const std::vector<const char*>& names) {
    std::string err = detail::profiler_chip(device, &chip);
    if (!err.empty()) return err;
    const Availability& prepared = availability();
    std::vector<uint8_t> image;
    if (prepared.ctx == ctx && !prepared.image.empty()) {
      image = prepared.image;
    } else {
      err = query_availability(ctx, &image);
      if (!err.empty() && !prepared.error.empty()) err += "; before the jail: " + prepared.error;
      if (!err.empty()) return err;
    }
    CUpti_Profiler_Host_Initialize_Params host{};
    host.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE;
    host.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    host.pChipName = chip.c_str();
    host.pCounterAvailabilityImage = image.data();
    err = failed(cuptiProfilerHostInitialize(&host), "cuptiProfilerHostInitialize");
    if (!err.empty()) return err;
    object = host.pHostObject;
    CUpti_Profiler_Host_ConfigAddMetrics_Params add{};
    add.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE;
    add.pHostObject = object;
    add.ppMetricNames = const_cast<const char**>(names.data());
    add.numMetrics = names.size();
    err = failed(cuptiProfilerHostConfigAddMetrics(&add), "cuptiProfilerHostConfigAddMetrics");
    if (!err.empty()) return err;
    CUpti_Profiler_Host_GetConfigImageSize_Params size{};
    size.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE;
    size.pHostObject = object;
    err = failed(cuptiProfilerHostGetConfigImageSize(&size), "cuptiProfilerHostGetConfigImageSize");
    if (!err.empty()) return err;
    config.assign(size.configImageSize, 0);
    CUpti_Profiler_Host_GetConfigImage_Params get{};
    get.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE;
    get.pHostObject = object;
    get.configImageSize = config.size();
    get.pConfigImage = config.data();
    err = failed(cuptiProfilerHostGetConfigImage(&get), "cuptiProfilerHostGetConfigImage");
    if (!err.empty()) return err;
    CUpti_Profiler_Host_GetNumOfPasses_Params np{};
    np.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE;
    np.configImageSize = config.size();
    np.pConfigImage = config.data();
    err = failed(cuptiProfilerHostGetNumOfPasses(&np), "cuptiProfilerHostGetNumOfPasses");
    passes = np.numOfPasses;
    return err;
  }
};

// The range profiler enabled on a context for one call; disabled when it goes out of scope.
struct Profiler {
  CUpti_RangeProfiler_Object* object = nullptr;
  ~Profiler() {
    if (!object) return;
    CUpti_RangeProfiler_Disable_Params d{};
    d.structSize = CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE;
    d.pRangeProfilerObject = object;
    cuptiRangeProfilerDisable(&d);
  }
};

}  // namespace range_detail

// Query the context's counter availability now, for every later hardware-counted call (cupti_api.h).
inline std::string hw_prepare(void* context, int device) {
  namespace d = range_detail;
  d::Availability& a = d::availability();
  a = d::Availability{};
  std::string chip;
  std::string err = detail::profiler_chip(device, &chip);
  if (err.empty()) err = d::query_availability(static_cast<CUcontext>(context), &a.image);
  if (err.empty()) {
    a.ctx = static_cast<CUcontext>(context);
  } else {
    a.image.clear();
    a.error = err;
  }
  return err;
}

// One call under the range profiler (cupti_api.h). `run` is called at most once; *ran says whether.
inline std::string hw_count_json(const std::function<void()>& run, void* context, int device, std::string* json,
                                 bool* ran) {
  namespace d = range_detail;
  *ran = false;
  CUcontext ctx = static_cast<CUcontext>(context);
  std::vector<const char*> names;
  for (const std::string& n : hw_metrics()) names.push_back(n.c_str());
  HwReading reading;
  auto t = std::chrono::steady_clock::now();
  auto phase = [&](const char* name) {  // the wall of the phase just ended (HwReading::host_ms)
    auto now = std::chrono::steady_clock::now();
    reading.host_ms.emplace_back(name, std::chrono::duration<double, std::milli>(now - t).count());
    t = now;
  };
  std::string err = detail::sass_unset(detail::state(), device);
  if (!err.empty()) return hw_count_error(err);
  d::Host host;
  err = host.setup(ctx, device, names);
  if (!err.empty()) return hw_count_error(err);
  phase("setup");
  reading.passes = host.passes;
  if (host.passes != 1) return hw_count_error(hw_counts_json(reading, json));
  d::Profiler prof;
  CUpti_RangeProfiler_Enable_Params on{};
  on.structSize = CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE;
  on.ctx = ctx;
  err = d::failed(cuptiRangeProfilerEnable(&on), "cuptiRangeProfilerEnable");
  if (!err.empty()) return hw_count_error(err);
  prof.object = on.pRangeProfilerObject;
  phase("enable");
  CUpti_RangeProfiler_GetCounterDataSize_Params size{};
  size.structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE;
  size.pRangeProfilerObject = prof.object;
  size.pMetricNames = names.data();
  size.numMetrics = names.size();
  size.maxNumOfRanges = 1;
  size.maxNumRangeTreeNodes = 1;
  err = d::failed(cuptiRangeProfilerGetCounterDataSize(&size), "cuptiRangeProfilerGetCounterDataSize");
  if (!err.empty()) return hw_count_error(err);
  std::vector<uint8_t> data(size.counterDataSize);
  CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{};
  init.structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE;
  init.pRangeProfilerObject = prof.object;
  init.counterDataSize = data.size();
  init.pCounterData = data.data();
  err = d::failed(cuptiRangeProfilerCounterDataImageInitialize(&init), "cuptiRangeProfilerCounterDataImageInitialize");
  if (!err.empty()) return hw_count_error(err);
  CUpti_RangeProfiler_SetConfig_Params set{};
  set.structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE;
  set.pRangeProfilerObject = prof.object;
  set.configSize = host.config.size();
  set.pConfig = host.config.data();
  set.counterDataImageSize = data.size();
  set.pCounterDataImage = data.data();
  set.range = CUPTI_UserRange;
  set.replayMode = CUPTI_UserReplay;
  set.maxRangesPerPass = 1;
  set.numNestingLevels = 1;
  set.minNestingLevel = 1;
  set.passIndex = 0;
  set.targetNestingLevel = 1;
  err = d::failed(cuptiRangeProfilerSetConfig(&set), "cuptiRangeProfilerSetConfig");
  if (!err.empty()) return hw_count_error(err);
  phase("config");
  CUpti_RangeProfiler_Start_Params start{};
  start.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE;
  start.pRangeProfilerObject = prof.object;
  err = d::failed(cuptiRangeProfilerStart(&start), "cuptiRangeProfilerStart");
  if (!err.empty()) return hw_count_error(err);
  CUpti_RangeProfiler_PushRange_Params push{};
  push.structSize = CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE;
  push.pRangeProfilerObject = prof.object;
  push.pRangeName = "call";
  err = d::failed(cuptiRangeProfilerPushRange(&push), "cuptiRangeProfilerPushRange");
  phase("start");
  CUpti_RangeProfiler_PopRange_Params pop{};
  pop.structSize = CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE;
  pop.pRangeProfilerObject = prof.object;
  CUpti_RangeProfiler_Stop_Params stop{};
  stop.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE;
  stop.pRangeProfilerObject = prof.object;
  *ran = true;
  try {  // the call runs even if the push failed (its error is reported after the call)
    run();
  } catch (...) {
    if (err.empty()) cuptiRangeProfilerPopRange(&pop);
    cuptiRangeProfilerStop(&stop);
    throw;  // after the profiler is disabled (Profiler's destructor)
  }
  phase("run");
  if (err.empty()) err = d::failed(cuptiRangeProfilerPopRange(&pop), "cuptiRangeProfilerPopRange");
  std::string stopped = d::failed(cuptiRangeProfilerStop(&stop), "cuptiRangeProfilerStop");
  if (err.empty()) err = stopped;
  if (!err.empty()) return hw_count_error(err);
  reading.all_passes_submitted = stop.isAllPassSubmitted != 0;
  CUpti_RangeProfiler_DecodeData_Params decode{};
  decode.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE;
  decode.pRangeProfilerObject = prof.object;
  err = d::failed(cuptiRangeProfilerDecodeData(&decode), "cuptiRangeProfilerDecodeData");
  if (!err.empty()) return hw_count_error(err);
  reading.dropped = decode.numOfRangeDropped;
  CUpti_RangeProfiler_GetCounterDataInfo_Params info{};
  info.structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE;
  info.pCounterDataImage = data.data();
  info.counterDataImageSize = data.size();
  err = d::failed(cuptiRangeProfilerGetCounterDataInfo(&info), "cuptiRangeProfilerGetCounterDataInfo");
  if (!err.empty()) return hw_count_error(err);
  reading.ranges = info.numTotalRanges;
  if (reading.ranges == 1) {
    reading.values.assign(names.size(), 0.0);
    CUpti_Profiler_Host_EvaluateToGpuValues_Params eval{};
    eval.structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE;
    eval.pHostObject = host.object;
    eval.pCounterDataImage = data.data();
    eval.counterDataImageSize = data.size();
    eval.rangeIndex = 0;
    eval.ppMetricNames = names.data();
    eval.numMetrics = names.size();
    eval.pMetricValues = reading.values.data();
    err = d::failed(cuptiProfilerHostEvaluateToGpuValues(&eval), "cuptiProfilerHostEvaluateToGpuValues");
    if (!err.empty()) return hw_count_error(err);
  }
  phase("read");
  err = hw_counts_json(reading, json);
  return err.empty() ? "" : hw_count_error(err);
}

// One hardware-counted cycle with no call in it, its reading dropped (runner.cc's warm_hw_counters with
// Attach.hw_warm): whether the range profiler's start is cheaper in a process that has started it once
// (EvalSettings.hw_warm_start, an experiment). Whether the profiler was started (its empty call made);
// a reading's own error (a range with no kernel may read as none) is not the warm-up's concern.
inline bool hw_warm(void* context, int device) {
  std::string json;
  bool ran = false;
  hw_count_json([] {}, context, device, &json, &ran);
  return ran;
}

}  // namespace ptxrunner::cupti

#endif  // PTXGYM_RUNNER_CUPTI
