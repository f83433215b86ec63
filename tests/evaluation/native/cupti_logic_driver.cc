// Test driver for the runner's CUPTI logic (ptxgym/evaluation/runner/cupti_logic.h), no CUPTI needed.
// tests/evaluation/test_runner_cupti.py builds it with g++ and compares its answers with the Python
// worker's functions. Byte strings travel as hex (the runner's JSON reader takes ASCII only).
//   sha256 FILE...  one hex digest per line
//   elf FILE...     one line per file: the STT_FUNC names as a JSON array, or null
//   quote           stdin {"items": [[hex, max_chars or -1], ...]}: one JSON string per line
//   float           stdin {"values": [float, ...]}: each as the JSON writer writes it, one a line
//   spans           stdin {"records": [[start, end, hex name(, launch)]], "windows": [[seq, lo, hi]],
//                   "modules": [[id, hex image or null, size]], "census_error": hex}: the Spans JSON,
//                   then a second one of no records whose modules must be empty (taken once); with
//                   "incomplete" and "flushes" passed through; then "seen" or "unseen" (every_window_seen)
//   join            stdin {"records": [[start, end, hex name, correlation id]], "launches": [[id, t]]}:
//                   join_launches, then each record's launch, one a line
//   kname           kernel_name of a null name, an empty one and "k", kernel_record's of a null name and
//                   "k", copy_record's in brackets: one a line
//   far             strays over a kernel at 1 ns and a window past 2^63 ns (beyond the JSON reader's
//                   numbers): "<outside> <nearest ns>"
//   settle          stdin {"ready_after": n, "wait": ticks}: settle_flush on a clock of one tick a read,
//                   the records back after n default flushes: the flushes in order ("d" default, "f"
//                   forced), a space, the count it returned
//   sass            stdin {"available": [[name, id]], "records": [[hex name, pc, [[id, value]]]],
//                   "max_rows": n}: the rows JSON, or "no inst" when no instruction-count metric exists
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cupti_logic.h"
#include "json.h"

using namespace ptxrunner;
using namespace ptxrunner::cupti;

static std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

static std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

static Json read_stdin() {
  std::stringstream ss;
  ss << std::cin.rdbuf();
  std::string text = ss.str();
  return JsonReader(text).parse();
}

static uint64_t u64(const Json& j) { return static_cast<uint64_t>(j.as_int("number")); }

static int spans() {
  Json in = read_stdin();
  std::vector<Record> records;
  for (const Json& r : in.at("records").as_array("records")) {
    records.push_back({u64(r.items.at(0)), u64(r.items.at(1)), unhex(r.items.at(2).as_str("name"))});
    if (r.items.size() > 3) records.back().launch = u64(r.items.at(3));
  }
  std::vector<Window> windows;
  for (const Json& w : in.at("windows").as_array("windows"))
    windows.push_back({w.items.at(0).as_int("seq"), u64(w.items.at(1)), u64(w.items.at(2))});
  ModuleTable table;
  for (const Json& m : in.at("modules").as_array("modules")) {
    uint32_t id = static_cast<uint32_t>(m.items.at(0).as_int("id"));
    if (m.items.at(1).kind == Json::kNull) {
      table.put(id, module_record(nullptr, u64(m.items.at(2))));
    } else {
      std::string image = unhex(m.items.at(1).as_str("image"));
      table.put(id, module_record(image.data(), image.size()));
    }
  }
  std::string error = unhex(in.at("census_error").as_str("census_error"));
  uint64_t incomplete = in.has("incomplete") ? u64(in.at("incomplete")) : 0;
  int64_t flushes = in.has("flushes") ? in.at("flushes").as_int("flushes") : 0;
  std::cout << spans_json(records, windows, table.take(), error, incomplete, flushes) << "\n";
  std::cout << spans_json({}, {}, table.take(), error) << "\n";
  std::cout << (every_window_seen(records, windows) ? "seen" : "unseen") << "\n";
  return 0;
}

static int join() {
  Json in = read_stdin();
  std::vector<Record> records;
  for (const Json& r : in.at("records").as_array("records"))
    records.push_back(kernel_record(u64(r.items.at(0)), u64(r.items.at(1)),
                                    unhex(r.items.at(2).as_str("name")).c_str(),
                                    static_cast<uint32_t>(u64(r.items.at(3)))));
  std::map<uint32_t, uint64_t> launches;
  for (const Json& l : in.at("launches").as_array("launches"))
    launches[static_cast<uint32_t>(u64(l.items.at(0)))] = u64(l.items.at(1));
  join_launches(&records, launches);
  for (const Record& r : records) std::cout << r.launch << "\n";
  return 0;
}

static int kname() {
  std::cout << kernel_name(nullptr) << "\n" << kernel_name("") << "\n" << kernel_name("k") << "\n";
  std::cout << kernel_record(1, 2, nullptr).name << "\n" << kernel_record(1, 2, "k").name << "\n";
  std::cout << "[" << copy_record(1, 2).name << "]\n";
  return 0;
}

static int far() {
  uint64_t lo = (uint64_t(1) << 63) + 10;
  int64_t nearest = 0;
  bool has = false;
  uint64_t outside = strays({{1, 2, "k"}}, {{1, lo, lo + 10}}, &nearest, &has);
  std::cout << outside << " " << (has ? std::to_string(nearest) : "none") << "\n";
  return 0;
}

static int settle() {
  Json in = read_stdin();
  int64_t ready_after = in.at("ready_after").as_int("ready_after");
  uint64_t ticks = 0, wait = u64(in.at("wait"));
  int64_t defaults = 0;
  std::string order;
  auto flush = [&](bool forced) {
    order += forced ? "f" : "d";
    if (!forced) ++defaults;
  };
  int tries = settle_flush(flush, [&] { return defaults >= ready_after; }, [&] { return ticks++; }, [] {}, wait);
  std::cout << order << " " << tries << "\n";
  return 0;
}

static int sass() {
  Json in = read_stdin();
  std::map<std::string, uint64_t> available;
  for (const Json& a : in.at("available").as_array("available"))
    available[a.items.at(0).as_str("name")] = u64(a.items.at(1));
  std::optional<uint64_t> inst = pick_metric(available, inst_metrics());
  std::optional<uint64_t> threads = pick_metric(available, thread_metrics());
  if (!inst) {
    std::cout << "no inst\n";
    return 0;
  }
  std::vector<SassRecord> records;
  for (const Json& r : in.at("records").as_array("records")) {
    SassRecord rec{unhex(r.items.at(0).as_str("function")), static_cast<uint32_t>(u64(r.items.at(1))), {}};
    for (const Json& v : r.items.at(2).as_array("values"))
      rec.values.emplace_back(u64(v.items.at(0)), u64(v.items.at(1)));
    records.push_back(std::move(rec));
  }
  std::cout << sass_rows_json(merge_records(records, *inst, threads), u64(in.at("max_rows"))) << "\n";
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string cmd = argv[1];
  try {
    if (cmd == "sha256") {
      for (int i = 2; i < argc; ++i) {
        std::string data = read_file(argv[i]);
        std::cout << sha256_hex(data.data(), data.size()) << "\n";
      }
    } else if (cmd == "elf") {
      for (int i = 2; i < argc; ++i) {
        std::string data = read_file(argv[i]);
        auto names = elf_functions(reinterpret_cast<const unsigned char*>(data.data()), data.size());
        std::string line = names ? "[" : "null";
        for (size_t k = 0; names && k < names->size(); ++k) line += (k ? "," : "") + json_string((*names)[k]);
        std::cout << line << (names ? "]" : "") << "\n";
      }
    } else if (cmd == "quote") {
      Json in = read_stdin();  // kept alive: the loop refers into it
      for (const Json& item : in.at("items").as_array("items")) {
        int64_t max_chars = item.items.at(1).as_int("max_chars");
        std::cout << json_string(unhex(item.items.at(0).as_str("hex")),
                                 max_chars < 0 ? std::string::npos : static_cast<size_t>(max_chars))
                  << "\n";
      }
    } else if (cmd == "float") {
      Json in = read_stdin();
      for (const Json& v : in.at("values").as_array("values")) std::cout << json_float(v.f) << "\n";
    } else if (cmd == "spans") {
      return spans();
    } else if (cmd == "join") {
      return join();
    } else if (cmd == "sass") {
      return sass();
    } else if (cmd == "kname") {
      return kname();
    } else if (cmd == "far") {
      return far();
    } else if (cmd == "settle") {
      return settle();
    } else {
      return 2;
    }
  } catch (const std::exception& exc) {
    std::cerr << exc.what() << "\n";
    return 1;
  }
  return 0;
}
