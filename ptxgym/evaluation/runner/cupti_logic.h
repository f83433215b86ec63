// The pure part of the runner's CUPTI path (cupti_path.h): no CUPTI call, so it is tested on a CPU
// host against the Python worker's functions (tests/evaluation/test_runner_cupti.py).
//
//  * spans: every kernel, memcpy and memset record whose start lies in a timed call's window
//    [t0, t1] belongs to that call, and so does a kernel that starts before t0 and ends kRunInNs or more
//    past it, or whose launch (the host stamp of the API call that launched it, joined by correlation
//    id: join_launches) lies in the window (Records; cupti_spans.Records says why); its span is
//    max(end) - min(start) in ms (cupti_spans.spans_by_window);
//  * kernel census: launches per kernel name over the kernel records belonging to some window
//    (kernels_by_window);
//  * modules: the cubin's SHA-256, size and ELF function symbols, keyed by CUPTI's module id, reported
//    once in load order (CuptiSpans._read_module and census);
//  * SASS counts: CUPTI's records summed per (function, pc) over the chosen metrics
//    (sass_counts.merge_records), written as protocol.SassRow objects (the worker's row and name limits).
// JSON texts are shaped like protocol.Spans / LoadedModule / SassRow. Strings are decoded as UTF-8 with
// Python's errors="replace" and written as ASCII JSON (\uXXXX escapes): json.h's JsonWriter::quote would
// turn each byte past ASCII into its own code point, which changes a UTF-8 name.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cubin_elf.h"
#include "sha256.h"
#include "utf8.h"

namespace ptxrunner::cupti {

constexpr uint64_t kMaxCubinBytes = uint64_t(1) << 30;  // cupti_spans._MAX_CUBIN_BYTES
constexpr size_t kMaxFunctionChars = 4096;              // the worker's SassRow.function[:4096]

// A JSON string of s decoded as UTF-8 with Python's errors="replace", cut to max_chars code points.
inline std::string json_string(const std::string& s, size_t max_chars = std::string::npos) {
  std::string out = "\"";
  char buf[16];
  size_t chars = 0;
  for (size_t i = 0; i < s.size() && chars < max_chars; ++chars) {
    uint32_t cp = 0;
    if (!utf8_next(s, &i, &cp)) cp = 0xFFFD;
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp >= 0x20 && cp < 0x7F) {
      out += static_cast<char>(cp);
    } else if (cp < 0x10000) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else {  // a surrogate pair
      uint32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      out += buf;
    }
  }
  return out + "\"";
}

// A finite float as Python's json writes it (repr): the fewest significant digits that read back as the
// same double; positional from 1e-4 up to 1e16 (with ".0" on an integral value), else d.ddde+XX.
inline std::string json_float(double v) {
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string text = buf;  // [-]d[.ddd]e(+|-)XX
  std::string sign = text[0] == '-' ? "-" : "";
  size_t e = text.find('e');
  std::string digits = text.substr(sign.size(), e - sign.size());
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp = std::atoi(text.c_str() + e + 1);
  if (exp < -4 || exp >= 16) {
    std::string mantissa = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return sign + mantissa + buf;
  }
  if (exp < 0) return sign + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  size_t whole = static_cast<size_t>(exp) + 1;
  if (digits.size() <= whole) return sign + digits + std::string(whole - digits.size(), '0') + ".0";
  return sign + digits.substr(0, whole) + "." + digits.substr(whole);
}

// One GPU activity record: a kernel (its name) or a memcpy/memset (empty name). A kernel's `launch` is
// the host stamp of the API call that launched it (0: unknown), set by join_launches from CUPTI's
// correlation id.
struct Record {
  uint64_t start = 0;
  uint64_t end = 0;
  std::string name;
  uint64_t launch = 0;
  uint32_t correlation = 0;
};

// One timed call's host window [lo, hi] (CUPTI timestamps), by command sequence number.
struct Window {
  int64_t seq = 0;
  uint64_t lo = 0;
  uint64_t hi = 0;
};

// A kernel record's name as the census reads it (cupti_spans.kernel_name): a kernel record with no name
// or an empty one is "(unnamed kernel)", never taken for a memcpy or memset (whose names are empty, and
// which the census passes over): no built module defines that name, so it is foreign.
constexpr const char* kUnnamedKernel = "(unnamed kernel)";
inline std::string kernel_name(const char* name) { return name && *name ? name : kUnnamedKernel; }

// The record of a kernel (named by kernel_name) and of a memcpy or memset (no name), as cupti_path.h's
// buffer callback makes them from CUPTI's records.
inline Record kernel_record(uint64_t start, uint64_t end, const char* name, uint32_t correlation = 0) {
  return {start, end, kernel_name(name), 0, correlation};
}

// Each kernel record's launch: the start stamp of the launch API record of its correlation id
// (`launches`: correlation id -> host stamp; ids of 0 and records without one keep launch 0).
inline void join_launches(std::vector<Record>* records, const std::map<uint32_t, uint64_t>& launches) {
  for (Record& r : *records) {
    if (r.name.empty() || r.correlation == 0) continue;
    auto it = launches.find(r.correlation);
    if (it != launches.end()) r.launch = it->second;
  }
}
inline Record copy_record(uint64_t start, uint64_t end) { return {start, end, ""}; }

// Whether a record's timestamps are filled in (cupti_spans.complete): a forced flush hands back records
// CUPTI has not completed, with a timestamp of 0; such a record is counted, never cut into a span.
inline bool complete(uint64_t start, uint64_t end) { return start != 0 && end != 0 && end >= start; }

// How far past a window's start a kernel that started before it must run to belong to it
// (cupti_spans.RUN_IN_NS says why), and that end for a window starting at `lo` (saturating, as Python's).
constexpr uint64_t kRunInNs = 50000;
inline uint64_t run_in(uint64_t lo) { return lo > UINT64_MAX - kRunInNs ? UINT64_MAX : lo + kRunInNs; }

// A trial's records sorted for the window look-ups (cupti_spans.Records): a record belongs to a window
// [lo, hi] when it starts inside it, or when it is a kernel (a named record) that starts before lo and
// ends at least kRunInNs past it (a stamp skewed early, or a kernel launched before the window running
// into it), or a kernel whose launch lies inside it (a stamp skewed early past its whole run).
struct Records {
  explicit Records(const std::vector<Record>& records) {
    for (const Record& r : records) by_start.push_back(&r);
    std::stable_sort(by_start.begin(), by_start.end(),
                     [](const Record* a, const Record* b) { return a->start < b->start; });
    for (const Record* r : by_start) {
      starts.push_back(r->start);
      if (r->name.empty()) continue;
      kernel_starts.push_back(r->start);
      kernel_ends.push_back(r->end);
      reach.push_back(reach.empty() ? r->end : std::max(reach.back(), r->end));
      if (r->launch) by_launch.push_back(r);
    }
    std::stable_sort(by_launch.begin(), by_launch.end(),
                     [](const Record* a, const Record* b) { return a->launch < b->launch; });
    for (const Record* r : by_launch) launches.push_back(r->launch);
  }
  // The kernels launched inside [lo, hi]: by_launch[*a, *b) (empty where hi < lo).
  void launched(uint64_t lo, uint64_t hi, size_t* a, size_t* b) const {
    *a = size_t(std::lower_bound(launches.begin(), launches.end(), lo) - launches.begin());
    *b = std::max(*a, size_t(std::upper_bound(launches.begin(), launches.end(), hi) - launches.begin()));
  }
  // The records starting inside [lo, hi]: by_start[*a, *b) (empty where hi < lo).
  void inside(uint64_t lo, uint64_t hi, size_t* a, size_t* b) const {
    *a = size_t(std::lower_bound(starts.begin(), starts.end(), lo) - starts.begin());
    *b = std::max(*a, size_t(std::upper_bound(starts.begin(), starts.end(), hi) - starts.begin()));
  }
  size_t kernels_before(uint64_t lo) const {
    return size_t(std::lower_bound(kernel_starts.begin(), kernel_starts.end(), lo) - kernel_starts.begin());
  }
  // The records belonging to [lo, hi]: their count, min start and max end (0, 0, 0: none).
  void belonging(uint64_t lo, uint64_t hi, uint64_t* count, uint64_t* first, uint64_t* last) const {
    size_t a = 0, b = 0;
    inside(lo, hi, &a, &b);
    *count = b - a;
    *first = *count ? starts[a] : 0;
    *last = 0;
    for (size_t i = a; i < b; ++i) *last = std::max(*last, by_start[i]->end);
    size_t k = kernels_before(lo);
    uint64_t end = run_in(lo);
    if (k && reach[k - 1] >= end) {  // the earliest-starting kernel before lo that runs in
      size_t j = size_t(std::lower_bound(reach.begin(), reach.begin() + k, end) - reach.begin());
      for (size_t i = j; i < k; ++i) *count += kernel_ends[i] >= end ? 1 : 0;
      *first = kernel_starts[j];
      *last = std::max(*last, reach[k - 1]);
    }
    size_t la = 0, lb = 0;  // kernels launched inside that neither start inside nor run in
    launched(lo, hi, &la, &lb);
    for (size_t i = la; i < lb; ++i) {
      const Record* r = by_launch[i];
      if (r->start >= lo && r->start <= hi) continue;
      if (r->start < lo && r->end >= end) continue;
      *first = *count ? std::min(*first, r->start) : r->start;
      *last = *count ? std::max(*last, r->end) : r->end;
      ++*count;
    }
  }
  // Whether a record belongs to the window (sorted look-ups alone).
  bool holds(const Window& w) const {
    size_t a = 0, b = 0;
    inside(w.lo, w.hi, &a, &b);
    size_t k = kernels_before(w.lo);
    size_t la = 0, lb = 0;
    launched(w.lo, w.hi, &la, &lb);
    return b > a || (k && reach[k - 1] >= run_in(w.lo)) || lb > la;
  }
  std::vector<const Record*> by_start, by_launch;
  std::vector<uint64_t> starts, kernel_starts, kernel_ends, reach, launches;
};

// Whether a record belongs to every window (cupti_spans.every_window_seen): the trial's records are all
// back, unless a call launched nothing.
inline bool every_window_seen(const std::vector<Record>& records, const std::vector<Window>& windows) {
  Records index(records);
  return std::all_of(windows.begin(), windows.end(), [&index](const Window& w) { return index.holds(w); });
}

// The trial's last flushes (cupti_spans.settle_flush): `flush(false)` (CUPTI's default flush, which hands
// back only buffers whose records are all complete) until `seen()` or `wait_ns` has passed on `now_ns`,
// `nap()` between tries; then `flush(true)` (forced: the rest, incomplete records too). The number of
// default flushes made. A forced flush at once would drop records CUPTI had not completed yet; honest
// calls' records went missing on a loaded host (a TIMING_ANOMALY an honest candidate could not avoid:
// bench/results/throughput_2026-12-06_s33_spares4_h100.txt), though not for that reason (the lossy
// trials of throughput_2026-12-06_s35_quiet_h100.txt had no incomplete record; strays() says more).
template <class Flush, class Seen, class Now, class Nap>
inline int settle_flush(Flush flush, Seen seen, Now now_ns, Nap nap, uint64_t wait_ns) {
  int tries = 0;
  uint64_t until = now_ns() + wait_ns;
  for (;;) {
    flush(false);
    ++tries;
    if (seen() || now_ns() >= until) break;
    nap();
  }
  flush(true);
  return tries;
}

// protocol.LoadedModule.
struct Module {
  std::string sha256;
  uint64_t size = 0;
  std::optional<std::vector<std::string>> functions;
};

// The census record of a cubin the driver handed CUPTI (pointer and size as CUPTI gives them): no hash
// and no functions when there is no image or its size is 0 or past 1 GiB.
inline Module module_record(const void* image, uint64_t size) {
  Module m;
  m.size = size;
  if (!image || size == 0 || size > kMaxCubinBytes) return m;
  m.sha256 = sha256_hex(image, size);
  m.functions = elf_functions(static_cast<const unsigned char*>(image), size);
  return m;
}

// Modules by CUPTI module id: the first load's position, the latest load's record (a Python dict).
class ModuleTable {
 public:
  void put(uint32_t id, Module m) {
    auto it = index_.find(id);
    if (it != index_.end()) {
      modules_[it->second] = std::move(m);
      return;
    }
    index_[id] = modules_.size();
    modules_.push_back(std::move(m));
  }
  // Every module since the last take, in load order; the table is then empty.
  std::vector<Module> take() {
    index_.clear();
    return std::exchange(modules_, {});
  }

 private:
  std::map<uint32_t, size_t> index_;
  std::vector<Module> modules_;
};

// Sequence numbers in first-window order, each with its last window (a Python dict built from the list).
inline std::vector<Window> unique_windows(const std::vector<Window>& windows) {
  std::vector<Window> out;
  std::map<int64_t, size_t> at;
  for (const Window& w : windows) {
    auto it = at.find(w.seq);
    if (it != at.end()) {
      out[it->second] = w;
    } else {
      at[w.seq] = out.size();
      out.push_back(w);
    }
  }
  return out;
}

// The windows as (lo, hi) sorted by lo, each hi raised to the running maximum (in_any's input).
inline std::vector<std::pair<uint64_t, uint64_t>> max_hi_sorted(const std::vector<Window>& windows) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const Window& w : windows) out.emplace_back(w.lo, w.hi);
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i) out[i].second = std::max(out[i].second, out[i - 1].second);
  return out;
}

// Whether a stamp lies inside some window (windows sorted by lo, with the running maximum of hi).
inline bool inside_any(const std::vector<std::pair<uint64_t, uint64_t>>& sorted_max_hi, uint64_t t) {
  auto it = std::upper_bound(sorted_max_hi.begin(), sorted_max_hi.end(), std::make_pair(t, UINT64_MAX));
  return it != sorted_max_hi.begin() && std::prev(it)->second >= t;
}

// Where a record belongs (cupti_spans.placements; windows sorted by lo, with the running maximum of hi):
// 0 in no window, 1 starting inside one, 2 a kernel running into the next one, 3 a kernel launched
// inside one (and neither of those).
inline int placement(const std::vector<std::pair<uint64_t, uint64_t>>& sorted_max_hi, const Record& r) {
  auto it = std::upper_bound(sorted_max_hi.begin(), sorted_max_hi.end(), std::make_pair(r.start, UINT64_MAX));
  if (it != sorted_max_hi.begin() && std::prev(it)->second >= r.start) return 1;
  if (r.name.empty()) return 0;
  if (it != sorted_max_hi.end() && run_in(it->first) <= r.end) return 2;
  return r.launch && inside_any(sorted_max_hi, r.launch) ? 3 : 0;
}

// Whether a record belongs to some window (cupti_spans.in_some_window).
inline bool in_any(const std::vector<std::pair<uint64_t, uint64_t>>& sorted_max_hi, const Record& r) {
  return placement(sorted_max_hi, r) > 0;
}

// Where a trial's records fell that its windows did not hold (cupti_spans.strays): how many records belong
// to no window, and over the windows holding none, the median (the lower middle one) of the signed
// distance in ns from the window to the nearest kernel record's start (negative: before its lo;
// positive: after its hi; ties to the earlier record; a distance past INT64_MAX counts as INT64_MAX);
// `has_nearest` false when there is none. Sorted look-ups: a trial may hold many records.
inline uint64_t strays(const std::vector<Record>& records, const std::vector<Window>& windows,
                       int64_t* nearest_ns, bool* has_nearest) {
  const std::vector<std::pair<uint64_t, uint64_t>> sorted_max_hi = max_hi_sorted(windows);
  uint64_t outside = 0;
  std::vector<uint64_t> kernels;
  for (const Record& r : records) {
    outside += in_any(sorted_max_hi, r) ? 0 : 1;
    if (!r.name.empty()) kernels.push_back(r.start);
  }
  const Records index(records);
  std::sort(kernels.begin(), kernels.end());
  constexpr uint64_t kMax = static_cast<uint64_t>(INT64_MAX);
  std::vector<int64_t> offsets;
  for (const Window& w : windows) {
    if (index.holds(w) || kernels.empty()) continue;
    auto after = std::lower_bound(kernels.begin(), kernels.end(), w.lo);  // none inside or running in
    bool has_before = after != kernels.begin();
    uint64_t before_d = has_before ? std::min(w.lo - *std::prev(after), kMax) : UINT64_MAX;
    uint64_t after_d = after != kernels.end() ? std::min(*after - w.hi, kMax) : UINT64_MAX;
    offsets.push_back(before_d <= after_d ? -static_cast<int64_t>(before_d) : static_cast<int64_t>(after_d));
  }
  *has_nearest = !offsets.empty();
  if (*has_nearest) {
    std::sort(offsets.begin(), offsets.end());
    *nearest_ns = offsets[(offsets.size() - 1) / 2];
  }
  return outside;
}

// protocol.Spans as JSON: spans and activity counts per window, the kernel census over all windows, the
// modules, the census error, the incomplete records left out, the default flushes made, the strays, the
// kernel records in a window only by running into it or only by their launch, and the kernel records
// whose launch is known.
inline std::string spans_json(const std::vector<Record>& records, const std::vector<Window>& windows,
                              const std::vector<Module>& modules, const std::string& census_error,
                              uint64_t incomplete = 0, int64_t flushes = 0) {
  const Records index(records);
  std::string spans, counts;
  for (const Window& w : unique_windows(windows)) {
    uint64_t count = 0, first = 0, last = 0;
    index.belonging(w.lo, w.hi, &count, &first, &last);
    std::string key = "\"" + std::to_string(w.seq) + "\":";
    std::string span = "null";
    if (count) {
      int64_t ns = static_cast<int64_t>(last) - static_cast<int64_t>(first);
      span = json_float(static_cast<double>(ns) / 1e6);
    }
    spans += (spans.empty() ? "" : ",") + key + span;
    counts += (counts.empty() ? "" : ",") + key + std::to_string(count);
  }
  const std::vector<std::pair<uint64_t, uint64_t>> sorted_max_hi = max_hi_sorted(windows);
  std::vector<std::pair<std::string, int64_t>> kernels;  // first-launch order, as Python's Counter
  std::map<std::string, size_t> kernel_at;
  uint64_t ran_in = 0;       // kernel records in a window only by running into it (cupti_spans.ran_in)
  uint64_t launched_in = 0;  // ... only by their launch (cupti_spans.launched_in)
  uint64_t launch_known = 0;  // kernel records whose launch is known (cupti_spans.launch_known)
  for (const Record& r : records) {
    launch_known += !r.name.empty() && r.launch ? 1 : 0;
    int where = r.name.empty() ? 0 : placement(sorted_max_hi, r);
    if (!where) continue;
    ran_in += where == 2 ? 1 : 0;
    launched_in += where == 3 ? 1 : 0;
    std::string key = json_string(r.name);
    auto it = kernel_at.find(key);
    if (it == kernel_at.end()) {
      kernel_at[key] = kernels.size();
      kernels.emplace_back(key, 1);
    } else {
      ++kernels[it->second].second;
    }
  }
  int64_t nearest_ns = 0;
  bool has_nearest = false;
  uint64_t outside = strays(records, windows, &nearest_ns, &has_nearest);
  std::string kernel_text;
  for (const auto& k : kernels)
    kernel_text += (kernel_text.empty() ? "" : ",") + k.first + ":" + std::to_string(k.second);
  std::string module_text;
  for (const Module& m : modules) {
    std::string functions = "null";
    if (m.functions) {
      functions.clear();
      for (const std::string& f : *m.functions) functions += (functions.empty() ? "" : ",") + json_string(f);
      functions = "[" + functions + "]";
    }
    module_text += std::string(module_text.empty() ? "" : ",") + "{\"sha256\":" + json_string(m.sha256) +
                   ",\"size\":" + std::to_string(m.size) + ",\"functions\":" + functions + "}";
  }
  return "{\"spans\":{" + spans + "},\"activities\":{" + counts + "},\"kernels\":{" + kernel_text +
         "},\"modules\":[" + module_text + "],\"census_error\":" + json_string(census_error) +
         ",\"incomplete\":" + std::to_string(incomplete) + ",\"flushes\":" + std::to_string(flushes) +
         ",\"outside\":" + std::to_string(outside) + ",\"empty_nearest_us\":" +
         (has_nearest ? json_float(static_cast<double>(nearest_ns) / 1e3) : std::string("null")) +
         ",\"ran_in\":" + std::to_string(ran_in) + ",\"launched_in\":" + std::to_string(launched_in) +
         ",\"launch_known\":" + std::to_string(launch_known) + "}";
}

// One CUPTI SASS metrics record: an instruction of a function, with (metric id, value) per instance.
struct SassRecord {
  std::string function;
  uint32_t pc = 0;
  std::vector<std::pair<uint64_t, uint64_t>> values;
};

// protocol.SassRow before JSON.
struct SassRow {
  std::string function;
  uint32_t pc = 0;
  uint64_t inst = 0;
  uint64_t threads = 0;
};

// The CUPTI SASS metric names per column, in the order tried (sass_counts.WANTED): inst_executed, then
// thread_inst_executed_true (Nsight Compute's source-page columns).
inline const std::vector<std::string>& inst_metrics() {
  static const std::vector<std::string> names = {"smsp__sass_inst_executed"};
  return names;
}
inline const std::vector<std::string>& thread_metrics() {
  static const std::vector<std::string> names = {"smsp__sass_thread_inst_executed_pred_on",
                                                 "smsp__sass_thread_inst_executed_op_pred_on"};
  return names;
}

// The metric id of the first name in `names` that `available` (name -> id) has; nullopt if none.
inline std::optional<uint64_t> pick_metric(const std::map<std::string, uint64_t>& available,
                                           const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    auto it = available.find(n);
    if (it != available.end()) return it->second;
  }
  return std::nullopt;
}

// Records summed per (function as decoded text, pc) in first-seen order; values of other metrics ignored.
inline std::vector<SassRow> merge_records(const std::vector<SassRecord>& records, uint64_t inst_id,
                                          std::optional<uint64_t> threads_id) {
  std::vector<SassRow> rows;
  std::map<std::pair<std::string, uint32_t>, size_t> at;
  for (const SassRecord& r : records) {
    std::string decoded = json_string(r.function);  // the key Python merges on: the replaced text
    auto key = std::make_pair(decoded, r.pc);
    auto it = at.find(key);
    size_t i = it != at.end() ? it->second : rows.size();
    if (it == at.end()) {
      at[key] = i;
      rows.push_back({r.function, r.pc, 0, 0});
    }
    for (const auto& [metric, value] : r.values) {
      if (metric == inst_id) rows[i].inst += value;
      else if (threads_id && metric == *threads_id) rows[i].threads += value;
    }
  }
  return rows;
}

// A JSON array of protocol.SassRow objects: the first max_rows rows, names cut to 4096 characters.
inline std::string sass_rows_json(const std::vector<SassRow>& rows, size_t max_rows) {
  std::string out = "[";
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    const SassRow& r = rows[i];
    out += std::string(i ? "," : "") + "{\"function\":" + json_string(r.function, kMaxFunctionChars) +
           ",\"pc\":" + std::to_string(r.pc) + ",\"inst\":" + std::to_string(r.inst) +
           ",\"threads\":" + std::to_string(r.threads) + "}";
  }
  return out + "]";
}

}  // namespace ptxrunner::cupti
