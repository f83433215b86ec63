// The pure part of the runner's hardware-counter call (cupti_range.h): which CUPTI range-profiler
// metrics it reads and how their values become protocol.HwCounts JSON. No CUPTI call, so it is tested on
// a CPU host (tests/evaluation/test_runner_hw_counts.py).
//
// The metrics (bench/range_profiler_metrics.sh lists them from CUPTI's host API for GH100, without a GPU;
// the three together need one pass, so the profiled call runs once, unreplayed and unpatched):
//  * smsp__inst_executed_pipe_tensor_op_gmma.sum: warp instructions executed by the tensor pipe as
//    HGMMA/QGMMA/IGMMA/BGMMA (a wgmma is one such instruction in each of its warpgroup's 4 warps);
//  * l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum: bytes read from L2 into L1TEX for global
//    TMA loads (the bytes TMA copies brought towards shared memory);
//  * smsp__inst_executed_op_tma_ld.sum: warp instructions UTMALDG and UBLKCP.S.G executed (reported, not
//    used by a verdict).
// A reading is usable only when it was one pass, one range and no dropped range, and every value is a
// finite, non-negative number; anything else is an error text, never counts.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "cupti_logic.h"

namespace ptxrunner::cupti {

inline const std::vector<std::string>& hw_metrics() {
  static const std::vector<std::string> names = {
      "smsp__inst_executed_pipe_tensor_op_gmma.sum",
      "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum",
      "smsp__inst_executed_op_tma_ld.sum",
  };
  return names;
}

// What CUPTI gave for one profiled call.
struct HwReading {
  size_t passes = 0;              // passes the config image needs (cuptiProfilerHostGetNumOfPasses)
  bool all_passes_submitted = false;  // cuptiRangeProfilerStop's isAllPassSubmitted
  size_t ranges = 0;              // ranges in the counter data (cuptiRangeProfilerGetCounterDataInfo)
  size_t dropped = 0;             // ranges dropped (cuptiRangeProfilerDecodeData)
  std::vector<double> values;     // one per hw_metrics() name, in order
  // Host wall milliseconds of the call's phases (setup, enable, run, read), in order: where the call's
  // time goes, reported beside the counters and never used by a verdict.
  std::vector<std::pair<std::string, double>> host_ms;
};

inline std::string hw_count_error(const std::string& message) {
  return ("HwCountError: " + message).substr(0, 500);
}

// protocol.HwCounts as JSON in *json and "", or why the reading is not usable (then *json is untouched).
inline std::string hw_counts_json(const HwReading& r, std::string* json) {
  const std::vector<std::string>& names = hw_metrics();
  if (r.passes != 1)
    return "the metrics need " + std::to_string(r.passes) + " passes; one unreplayed call needs exactly 1";
  if (!r.all_passes_submitted) return "the range profiler did not submit its pass";
  if (r.dropped != 0) return std::to_string(r.dropped) + " profiled range(s) were dropped";
  if (r.ranges != 1) return "expected 1 profiled range, got " + std::to_string(r.ranges);
  if (r.values.size() != names.size())
    return "expected " + std::to_string(names.size()) + " metric values, got " + std::to_string(r.values.size());
  std::string metrics;
  for (size_t i = 0; i < names.size(); ++i) {
    double v = r.values[i];
    if (!std::isfinite(v) || v < 0)
      return names[i] + " evaluated to " + (std::isfinite(v) ? json_float(v) : std::string("a non-finite value"));
    metrics += (metrics.empty() ? "" : ",") + json_string(names[i]) + ":" + json_float(v);
  }
  std::string phases;
  for (const auto& [name, ms] : r.host_ms)
    if (std::isfinite(ms) && ms >= 0) phases += (phases.empty() ? "" : ",") + json_string(name) + ":" + json_float(ms);
  *json = "{\"metrics\":{" + metrics + "},\"passes\":1,\"ranges\":1,\"host_ms\":{" + phases + "}}";
  return "";
}

}  // namespace ptxrunner::cupti
