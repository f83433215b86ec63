// The runner's CUPTI interface: in-band spans, kernel census and SASS counts, as the Python worker takes
// them (sandboxed/cupti_spans.py, sandboxed/sass_counts.py). Declarations only; the definitions live in
// cupti_path.h, compiled in with PTXGYM_RUNNER_CUPTI (build.py adds it where cupti.h is found).
// Every function returns "" on success or a short error text; none throws. JSON texts are UTF-8 objects
// shaped exactly like the protocol.py models named beside them, so the trusted side validates them with
// the same pydantic models it uses for the Python worker.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace ptxrunner::cupti {

// Start activity tracing (kernels, memcpys, memsets) and, with module_census, the module-load callback
// (cubin SHA-256, size and the ELF's function symbols of every module loaded from now on). Once per process.
std::string start(bool module_census);

// CUPTI's timestamp (the clock of activity records).
uint64_t now();

// A trial: begin() clears collected records and windows; window() marks one timed call's [t0, t1];
// end_json() flushes and cuts records into per-window spans: protocol.Spans as JSON
// {"spans": {"<seq>": ms | null}, "activities": {"<seq>": n}, "kernels": {"<name>": launches},
//  "modules": [{"sha256": hex, "size": bytes, "functions": [names] | null}], "census_error": ""}.
void begin();
void window(int64_t seq, uint64_t t0, uint64_t t1);
std::string end_json(std::string* json);

// One call under CUPTI's SASS metrics: `run` performs the call and synchronises. On success *json is a
// JSON array of protocol.SassRow objects [{"function": name, "pc": offset, "inst": n, "threads": n}]
// (at most max_rows). If the metrics could not be set up, `run` is not called and the error is returned;
// *ran tells the caller whether `run` was called.
std::string count_json(const std::function<void()>& run, int device, size_t max_rows, std::string* json,
                       bool* ran);

// One call under CUPTI's range profiler (cupti_range.h): hardware counters over every kernel `run`
// launches, no instruction patching, one pass. `context` is the CUcontext to profile. On success *json is
// protocol.HwCounts {"metrics": {"<metric>": value}, "passes": 1, "ranges": 1}; otherwise the error is
// "HwCountError: <why>" (hw_logic.h) and *json is untouched. *ran tells whether `run` was called; an
// exception from `run` propagates after the profiler is disabled.
std::string hw_count_json(const std::function<void()>& run, void* context, int device, std::string* json,
                          bool* ran);

// Query `context`'s counter availability (the range profiler's first step) and keep it for every later
// hw_count_json on that context; the runner calls this before its jail applies (on the H200 the query
// fails inside the jail). "" on success, else CUPTI's error (the later calls then query it themselves).
std::string hw_prepare(void* context, int device);

// One hardware-counted cycle with no call in it, its reading dropped (Attach.hw_warm; an experiment:
// whether the range profiler's next start is cheaper). Whether the profiler was started.
bool hw_warm(void* context, int device);

}  // namespace ptxrunner::cupti
