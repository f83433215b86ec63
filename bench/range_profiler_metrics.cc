// Which CUPTI range-profiler metrics measure wgmma and TMA work on Hopper, found without a GPU: the
// profiler *host* API works from a chip name ("GH100"). Prints every base metric whose name mentions
// TMA, bulk copies or tensor-core MMA (gmma/hgmma/tensor), with CUPTI's description and units, then, for
// chosen sets of metrics, how many passes (replays) collecting them together needs (1: no replay).
//
// Build and run: bench/range_profiler_metrics.sh [CHIP]
#include <cupti_profiler_host.h>
#include <cupti_result.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char* kKeywords[] = {"tma", "bulk", "gmma", "tensor"};

const char* type_name(CUpti_MetricType t) {
  return t == CUPTI_METRIC_TYPE_COUNTER ? "counter" : t == CUPTI_METRIC_TYPE_RATIO ? "ratio" : "throughput";
}

std::string err(CUptiResult r) {
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  return std::string(text ? text : "?") + " (" + std::to_string(r) + ")";
}

bool wanted(const char* name) {
  for (const char* k : kKeywords)
    if (std::strstr(name, k)) return true;
  return false;
}

// A fresh host object for `chip` (one per config image: ConfigAddMetrics accumulates).
CUpti_Profiler_Host_Object* host_object(const char* chip) {
  CUpti_Profiler_Host_Initialize_Params p{CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
  p.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  p.pChipName = chip;
  CUptiResult r = cuptiProfilerHostInitialize(&p);
  if (r != CUPTI_SUCCESS) {
    std::printf("cuptiProfilerHostInitialize(%s) failed: %s\n", chip, err(r).c_str());
    return nullptr;
  }
  return p.pHostObject;
}

void release(CUpti_Profiler_Host_Object* h) {
  CUpti_Profiler_Host_Deinitialize_Params d{CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
  d.pHostObject = h;
  cuptiProfilerHostDeinitialize(&d);
}

// Passes needed to collect `metrics` together (0 and a message on an error).
size_t passes(const char* chip, const std::vector<const char*>& metrics) {
  CUpti_Profiler_Host_Object* h = host_object(chip);
  if (!h) return 0;
  size_t n = 0;
  CUpti_Profiler_Host_ConfigAddMetrics_Params add{CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
  add.pHostObject = h;
  add.ppMetricNames = const_cast<const char**>(metrics.data());
  add.numMetrics = metrics.size();
  CUptiResult r = cuptiProfilerHostConfigAddMetrics(&add);
  CUpti_Profiler_Host_GetConfigImageSize_Params size{CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
  size.pHostObject = h;
  if (r == CUPTI_SUCCESS) r = cuptiProfilerHostGetConfigImageSize(&size);
  std::vector<uint8_t> image(size.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params get{CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
  get.pHostObject = h;
  get.configImageSize = image.size();
  get.pConfigImage = image.data();
  if (r == CUPTI_SUCCESS) r = cuptiProfilerHostGetConfigImage(&get);
  CUpti_Profiler_Host_GetNumOfPasses_Params np{CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
  np.configImageSize = image.size();
  np.pConfigImage = image.data();
  if (r == CUPTI_SUCCESS) r = cuptiProfilerHostGetNumOfPasses(&np);
  if (r == CUPTI_SUCCESS) n = np.numOfPasses;
  else std::printf("  config image failed: %s\n", err(r).c_str());
  release(h);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const char* chip = argc > 1 ? argv[1] : "GH100";
  CUpti_Profiler_Host_Object* h = host_object(chip);
  if (!h) return 1;
  CUpti_Profiler_Host_GetMaxNumHardwareMetricsPerPass_Params mx{
      CUpti_Profiler_Host_GetMaxNumHardwareMetricsPerPass_Params_STRUCT_SIZE};
  mx.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  mx.pChipName = chip;
  CUptiResult r = cuptiProfilerHostGetMaxNumHardwareMetricsPerPass(&mx);
  std::printf("chip %s: range profiler host API; max hardware metrics per pass: %s\n", chip,
              r == CUPTI_SUCCESS ? std::to_string(mx.maxMetricsPerPass).c_str() : err(r).c_str());
  for (int t = 0; t < CUPTI_METRIC_TYPE__COUNT; ++t) {
    CUpti_Profiler_Host_GetBaseMetrics_Params b{CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE};
    b.pHostObject = h;
    b.metricType = static_cast<CUpti_MetricType>(t);
    r = cuptiProfilerHostGetBaseMetrics(&b);
    if (r != CUPTI_SUCCESS) {
      std::printf("GetBaseMetrics(%s) failed: %s\n", type_name(b.metricType), err(r).c_str());
      continue;
    }
    size_t shown = 0;
    for (size_t i = 0; i < b.numMetrics; ++i) shown += wanted(b.ppMetricNames[i]);
    std::printf("\n== %s metrics: %zu in all, %zu naming tma/bulk/gmma/tensor\n", type_name(b.metricType),
                b.numMetrics, shown);
    for (size_t i = 0; i < b.numMetrics; ++i) {
      if (!wanted(b.ppMetricNames[i])) continue;
      CUpti_Profiler_Host_GetMetricProperties_Params p{CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE};
      p.pHostObject = h;
      p.pMetricName = b.ppMetricNames[i];
      r = cuptiProfilerHostGetMetricProperties(&p);
      if (r != CUPTI_SUCCESS) {
        std::printf("%s: properties failed: %s\n", b.ppMetricNames[i], err(r).c_str());
        continue;
      }
      std::printf("%s [%s, %s]: %s\n", b.ppMetricNames[i], p.pHwUnit ? p.pHwUnit : "",
                  p.pDimUnit ? p.pDimUnit : "", p.pDescription ? p.pDescription : "");
    }
  }
  release(h);
  const std::vector<std::vector<const char*>> sets = {
      {"smsp__inst_executed_pipe_tensor_op_gmma.sum"},
      {"l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"},
      {"smsp__inst_executed_pipe_tensor_op_gmma.sum", "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"},
      {"smsp__inst_executed_pipe_tensor_op_gmma.sum", "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum",
       "smsp__inst_executed_op_tma_ld.sum"},
      {"smsp__inst_executed_pipe_tensor_op_gmma.sum", "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum",
       "smsp__inst_executed_op_tma_ld.sum", "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum"},
      {"sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum", "sm__ops_path_tensor_op_hgmma_src_fp16.sum",
       "sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32.sum", "sm__ops_path_tensor_src_fp8.sum",
       "sm__ops_path_tensor_op_igmma_src_int8.sum"},
      {"smsp__sass_inst_executed_op_tma_ld.sum"},
  };
  std::printf("\n== passes (1: collected in one run of the kernels, no replay)\n");
  for (const auto& set : sets) {
    std::string names;
    for (const char* m : set) names += std::string(names.empty() ? "" : " + ") + m;
    std::printf("%zu pass(es): %s\n", passes(chip, set), names.c_str());
  }
  return 0;
}
