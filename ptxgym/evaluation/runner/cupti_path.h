// The runner's CUPTI path: the definitions of cupti_api.h, a port of sandboxed/cupti_spans.py (activity
// spans, kernel and module census) and sandboxed/sass_counts.py (one call under the SASS metrics API).
//
// Compiled in with PTXGYM_RUNNER_CUPTI against the toolkit's CUPTI headers; the runner then links
// libcupti (-lcupti, rpath to its directory). The pure logic (span cutting, census, SASS merge, JSON) is
// in cupti_logic.h, tested on the CPU; what is here only moves data between CUPTI and it:
//  * activity buffers (8 MiB, as the Python worker asks for) come back on CUPTI's thread, are parsed with
//    cuptiActivityGetNextRecord (CUpti_ActivityKernel10 / Memcpy6 / Memset4: the record layouts of the
//    CUPTI these headers are from, so start() refuses a libcupti of another CUDA major.minor) and
//    appended under a mutex;
//  * each kernel's launch: the driver and runtime API activity records (every API call's; enabling
//    the launch calls' alone, cuptiActivityEnableDriverApi / RuntimeApi per callback id, gave none on
//    an H100 with CUDA 13.0, bench/results/gpu_tests_2026-12-06_s41_runner_h100.txt), of which the
//    launch calls' (callback names holding "Launch", and the launch ids of the headers) keep their host
//    start stamps by correlation id, joined to the kernel records (join_launches) before the records
//    are read, so that a kernel stamped wholly before its call's window still belongs to it; the other
//    API records are dropped as they are read;
//  * the module census is CUPTI's resource callback (CUPTI_CBID_RESOURCE_MODULE_LOADED): the cubin is
//    hashed and its ELF read while the driver still holds it;
//  * the SASS counter is set up on the first counted call (profiler initialise, chip name, metric list,
//    configuration at GPU granularity) and kept; a failed setup is tried again at the next counted call.
// Error texts: start()'s and end_json()'s are CUPTI's own message; count_json()'s is the Python worker's
// count_error ("SassCountError: <message>", at most 500 characters). An exception thrown by count_json's
// `run` propagates (after the SASS metrics are disabled); nothing else here throws.
#pragma once

#include "cupti_api.h"
#include "cupti_logic.h"

#ifdef PTXGYM_RUNNER_CUPTI

#include <cupti.h>
#include <cupti_profiler_target.h>
#include <cupti_sass_metrics.h>
#include <cupti_target.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ptxrunner::cupti {

namespace detail {

constexpr size_t kBufferBytes = 8 * 1024 * 1024;
constexpr uint64_t kSettleNs = 30'000'000;  // cupti_spans.SETTLE_S: the default flushes' longest wait
constexpr size_t kMaxSassRecords = size_t(1) << 22;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_DRIVER,
                                         CUPTI_ACTIVITY_KIND_RUNTIME};

struct State {
  std::mutex mu;  // guards records, windows, modules, census_error (CUPTI calls back on other threads)
  bool started = false;
  bool enabled = false;
  std::string enable_error;
  std::vector<Record> records;
  std::map<uint32_t, uint64_t> launches;  // correlation id -> the launch API call's host start, this trial
  uint64_t incomplete = 0;  // records handed back without their timestamps (complete()), this trial
  std::vector<Window> windows;
  ModuleTable modules;
  std::string census_error;
  bool sass_ready = false;
  uint64_t inst_id = 0;
  std::optional<uint64_t> threads_id;
};

// Never destroyed: CUPTI may still hand back a buffer while the process exits.
inline State& state() {
  static State* s = new State;
  return *s;
}

// "<call> failed: <CUPTI's message> (<code>)", or "" on success.
inline std::string failed(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return "";
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  return std::string(call) + " failed: " + (text ? text : "unknown CUPTI error") + " (" + std::to_string(r) +
         ")";
}

// The callback ids of a domain whose names hold "Launch" (cuLaunchKernel, cuLaunchKernelEx, cuGraphLaunch,
// cudaLaunchKernel, __cudaLaunchKernel, ... and their _ptsz forms), and the headers' main launch ids.
inline std::set<CUpti_CallbackId> launch_ids(CUpti_CallbackDomain domain, uint32_t size,
                                             std::initializer_list<CUpti_CallbackId> known) {
  std::set<CUpti_CallbackId> ids(known);
  for (uint32_t id = 1; id < size; ++id) {
    const char* name = nullptr;
    if (cuptiGetCallbackName(domain, id, &name) == CUPTI_SUCCESS && name &&
        std::string(name).find("Launch") != std::string::npos)
      ids.insert(id);
  }
  return ids;
}

// Whether an API activity record is a launch call's (its start stamp is kept for join_launches).
inline bool is_launch(CUpti_ActivityKind kind, CUpti_CallbackId cbid) {
  static const std::set<CUpti_CallbackId> driver = launch_ids(
      CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE,
      {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
       CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
       CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
       CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz});
  static const std::set<CUpti_CallbackId> runtime = launch_ids(
      CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE,
      {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
       CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000});
  return (kind == CUPTI_ACTIVITY_KIND_DRIVER ? driver : runtime).count(cbid) > 0;
}

inline void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

inline void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<Record> got;
  std::vector<std::pair<uint32_t, uint64_t>> launched;
  uint64_t incomplete = 0;
  CUpti_Activity* rec = nullptr;
  try {
    while (buffer && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        got.push_back(kernel_record(k->start, k->end, k->name, k->correlationId));
      } else if (rec->kind == CUPTI_ACTIVITY_KIND_DRIVER || rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
        if (a->correlationId && a->start && is_launch(rec->kind, a->cbid))
          launched.emplace_back(a->correlationId, a->start);
      } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        got.push_back(copy_record(m->start, m->end));
      } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        got.push_back(copy_record(m->start, m->end));
      }
    }
    auto done =  // stable: the census keeps the records' first-launch order
        std::stable_partition(got.begin(), got.end(), [](const Record& r) { return complete(r.start, r.end); });
    incomplete = static_cast<uint64_t>(got.end() - done);
    got.erase(done, got.end());
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.records.insert(s.records.end(), got.begin(), got.end());
    for (const auto& [id, t] : launched) s.launches[id] = t;
    s.incomplete += incomplete;
  } catch (...) {  // out of memory on CUPTI's thread: the records are lost, the spans then say so (null)
  }
  std::free(buffer);
}

inline void CUPTIAPI on_resource(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void* cbdata) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE || cbid != CUPTI_CBID_RESOURCE_MODULE_LOADED) return;
  State& s = state();
  try {
    const auto* resource = static_cast<const CUpti_ResourceData*>(cbdata);
    if (!resource || !resource->resourceDescriptor) {
      std::lock_guard<std::mutex> lock(s.mu);
      s.census_error = "unreadable CUPTI module record: the resource callback carried no module data";
      return;
    }
    const auto* data = static_cast<const CUpti_ModuleResourceData*>(resource->resourceDescriptor);
    Module m = module_record(data->pCubin, data->cubinSize);  // hashed outside the lock
    std::lock_guard<std::mutex> lock(s.mu);
    s.modules.put(data->moduleId, std::move(m));
  } catch (const std::exception& exc) {  // a record we cannot read must not stop the tracing
    std::lock_guard<std::mutex> lock(s.mu);
    s.census_error = ("unreadable CUPTI module record: " + std::string(exc.what())).substr(0, 300);
  }
}

// Initialise CUPTI's profiler and name the device's chip (the SASS metrics' and the range profiler's
// first step); "" and *chip set, or the error.
inline std::string profiler_chip(int device, std::string* chip) {
  CUpti_Profiler_Initialize_Params init{};
  init.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE;
  std::string err = failed(cuptiProfilerInitialize(&init), "cuptiProfilerInitialize");
  if (!err.empty()) return err;
  CUpti_Device_GetChipName_Params chip_params{};
  chip_params.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE;
  chip_params.deviceIndex = static_cast<size_t>(device);
  err = failed(cuptiDeviceGetChipName(&chip_params), "cuptiDeviceGetChipName");
  if (!err.empty()) return err;
  *chip = chip_params.pChipName ? chip_params.pChipName : "";
  return "";
}

// Choose the metrics and configure the device (SassCounter.__init__); "" once configured.
inline std::string sass_setup(State& s, int device) {
  if (s.sass_ready) return "";
  std::string chip;
  std::string err = profiler_chip(device, &chip);
  if (!err.empty()) return err;
  CUpti_SassMetrics_GetNumOfMetrics_Params count{};
  count.structSize = CUpti_SassMetrics_GetNumOfMetrics_Params_STRUCT_SIZE;
  count.pChipName = chip.c_str();
  err = failed(cuptiSassMetricsGetNumOfMetrics(&count), "cuptiSassMetricsGetNumOfMetrics");
  if (!err.empty()) return err;
  std::vector<CUpti_SassMetrics_MetricDetails> details(count.numOfMetrics);
  CUpti_SassMetrics_GetMetrics_Params list{};
  list.structSize = CUpti_SassMetrics_GetMetrics_Params_STRUCT_SIZE;
  list.pChipName = chip.c_str();
  list.numOfMetrics = details.size();
  list.pMetricsList = details.data();
  err = failed(cuptiSassMetricsGetMetrics(&list), "cuptiSassMetricsGetMetrics");
  if (!err.empty()) return err;
  std::map<std::string, uint64_t> available;
  for (const auto& d : details) available[d.pMetricName ? d.pMetricName : ""] = d.metricId;
  std::optional<uint64_t> inst = pick_metric(available, inst_metrics());
  std::optional<uint64_t> threads = pick_metric(available, thread_metrics());
  if (!inst) return "no SASS instruction-count metric on '" + chip + "'";
  std::vector<CUpti_SassMetrics_Config> configs;
  for (const std::optional<uint64_t>& id : {inst, threads})
    if (id) configs.push_back({*id, CUPTI_SASS_METRICS_OUTPUT_GRANULARITY_GPU});
  CUpti_SassMetricsSetConfig_Params set{};
  set.structSize = CUpti_SassMetricsSetConfig_Params_STRUCT_SIZE;
  set.numOfMetricConfig = configs.size();
  set.pConfigs = configs.data();
  set.deviceIndex = static_cast<uint32_t>(device);
  err = failed(cuptiSassMetricsSetConfig(&set), "cuptiSassMetricsSetConfig");
  if (!err.empty()) return err;
  s.sass_ready = true;
  s.inst_id = *inst;
  s.threads_id = threads;
  return "";
}

// Read the patched instructions' counts (SassCounter._read), before the metrics are disabled.
inline std::string sass_read(const State& s, std::vector<SassRow>* rows) {
  CUpti_SassMetricsGetDataProperties_Params props{};
  props.structSize = CUpti_SassMetricsGetDataProperties_Params_STRUCT_SIZE;
  std::string err = failed(cuptiSassMetricsGetDataProperties(&props), "cuptiSassMetricsGetDataProperties");
  if (!err.empty()) return err;
  size_t records = props.numOfPatchedInstructionRecords, instances = props.numOfInstances;
  if (records == 0) return "";
  if (records > kMaxSassRecords || instances < 1 || instances > kMaxSassRecords / records)
    return "implausible SASS metric data: " + std::to_string(records) + " records x " +
           std::to_string(instances) + " instances";
  std::vector<CUpti_SassMetrics_InstanceValue> values(records * instances);
  std::vector<CUpti_SassMetrics_Data> data(records);
  for (size_t i = 0; i < records; ++i) {
    data[i].structSize = sizeof(CUpti_SassMetrics_Data);
    data[i].pInstanceValues = values.data() + i * instances;
  }
  CUpti_SassMetricsFlushData_Params flush{};
  flush.structSize = CUpti_SassMetricsFlushData_Params_STRUCT_SIZE;
  flush.numOfPatchedInstructionRecords = records;
  flush.numOfInstances = instances;
  flush.pMetricsData = data.data();
  err = failed(cuptiSassMetricsFlushData(&flush), "cuptiSassMetricsFlushData");
  if (!err.empty()) return err;
  std::vector<SassRecord> got(records);
  for (size_t i = 0; i < records; ++i) {
    got[i].function = kernel_name(data[i].functionName);
    got[i].pc = data[i].pcOffset;
    for (size_t j = 0; j < instances; ++j)
      got[i].values.emplace_back(values[i * instances + j].metricId, values[i * instances + j].value);
  }
  *rows = merge_records(got, s.inst_id, s.threads_id);
  return "";
}

inline std::string sass_disable() {
  CUpti_SassMetricsDisable_Params off{};
  off.structSize = CUpti_SassMetricsDisable_Params_STRUCT_SIZE;
  return failed(cuptiSassMetricsDisable(&off), "cuptiSassMetricsDisable");
}

// Release the SASS metrics' device configuration (set up by the first counted call), so that the range
// profiler does not meet it; the next counted call sets it up again. "" when none was set.
inline std::string sass_unset(State& s, int device) {
  if (!s.sass_ready) return "";
  s.sass_ready = false;
  CUpti_SassMetricsUnsetConfig_Params off{};
  off.structSize = CUpti_SassMetricsUnsetConfig_Params_STRUCT_SIZE;
  off.deviceIndex = static_cast<uint32_t>(device);
  return failed(cuptiSassMetricsUnsetConfig(&off), "cuptiSassMetricsUnsetConfig");
}

inline std::string count_error(const std::string& message) {
  return ("SassCountError: " + message).substr(0, 500);
}

}  // namespace detail

inline std::string start(bool module_census) {
  detail::State& s = detail::state();
  if (s.started) return "";
  uint32_t version = 0;
  std::string err = detail::failed(cuptiGetVersion(&version), "cuptiGetVersion");
  if (!err.empty()) return err;
  if (version / 100 != CUPTI_API_VERSION / 100)
    return "libcupti reports API version " + std::to_string(version) +
           " but the runner was compiled against " + std::to_string(CUPTI_API_VERSION) +
           " (activity record layouts differ between CUDA releases)";
  err = detail::failed(cuptiActivityRegisterCallbacks(detail::buffer_requested, detail::buffer_completed),
                       "cuptiActivityRegisterCallbacks");
  if (!err.empty()) return err;
  std::string census_error = module_census ? "" : "module records not requested";
  if (module_census) {
    CUpti_SubscriberHandle subscriber = nullptr;
    err = detail::failed(cuptiSubscribe(&subscriber, detail::on_resource, nullptr), "cuptiSubscribe");
    if (err.empty())
      err = detail::failed(
          cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED),
          "cuptiEnableCallback");
    if (!err.empty()) census_error = ("CUPTI module callback unavailable: " + err).substr(0, 300);
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.census_error = census_error;
  s.started = true;
  return "";
}

inline uint64_t now() {
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  return t;
}

inline void begin() {
  detail::State& s = detail::state();
  if (!s.started) return;  // end_json says so
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.records.clear();
    s.launches.clear();
    s.windows.clear();
    s.incomplete = 0;
  }
  for (CUpti_ActivityKind kind : detail::kKinds) {
    std::string err = detail::failed(cuptiActivityEnable(kind), "cuptiActivityEnable");
    if (!err.empty() && s.enable_error.empty()) s.enable_error = err;
  }
  s.enabled = true;
}

inline void window(int64_t seq, uint64_t t0, uint64_t t1) {
  detail::State& s = detail::state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.windows.push_back({seq, t0, t1});
}

inline std::string end_json(std::string* json) {
  detail::State& s = detail::state();
  if (!s.started) return "CUPTI tracing is not started (start() failed or was not called)";
  std::string err = std::exchange(s.enable_error, "");
  int64_t flushes = 0;
  if (s.enabled) {
    std::string flushed;
    auto flush = [&flushed](bool forced) {
      if (forced) flushed = detail::failed(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
                                           "cuptiActivityFlushAll");
      else cuptiActivityFlushAll(0);  // its failure shows in the forced flush after it
    };
    auto seen = [&s] {
      std::lock_guard<std::mutex> lock(s.mu);
      join_launches(&s.records, s.launches);
      return every_window_seen(s.records, s.windows);
    };
    auto steady_ns = [] {
      return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now().time_since_epoch())
                                       .count());
    };
    auto nap = [] { std::this_thread::sleep_for(std::chrono::microseconds(200)); };
    flushes = settle_flush(flush, seen, steady_ns, nap, detail::kSettleNs);
    for (CUpti_ActivityKind kind : detail::kKinds) cuptiActivityDisable(kind);
    s.enabled = false;
    if (err.empty()) err = flushed;
  }
  if (!err.empty()) return err;
  std::lock_guard<std::mutex> lock(s.mu);
  join_launches(&s.records, s.launches);
  *json = spans_json(s.records, s.windows, s.modules.take(), s.census_error, s.incomplete, flushes);
  return "";
}

inline std::string count_json(const std::function<void()>& run, int device, size_t max_rows,
                              std::string* json, bool* ran) {
  *ran = false;
  detail::State& s = detail::state();
  std::string err = detail::sass_setup(s, device);
  if (!err.empty()) return detail::count_error(err);
  CUpti_SassMetricsEnable_Params on{};
  on.structSize = CUpti_SassMetricsEnable_Params_STRUCT_SIZE;
  on.enableLazyPatching = 1;
  err = detail::failed(cuptiSassMetricsEnable(&on), "cuptiSassMetricsEnable");
  if (!err.empty()) return detail::count_error(err);
  *ran = true;
  try {
    run();
  } catch (...) {
    detail::sass_disable();
    throw;
  }
  std::vector<SassRow> rows;
  err = detail::sass_read(s, &rows);
  std::string off = detail::sass_disable();
  if (err.empty()) err = off;
  if (!err.empty()) return detail::count_error(err);
  *json = sass_rows_json(rows, max_rows);
  return "";
}

}  // namespace ptxrunner::cupti

#include "cupti_range.h"  // the range profiler's call (it releases the SASS configuration above first)

#endif  // PTXGYM_RUNNER_CUPTI
