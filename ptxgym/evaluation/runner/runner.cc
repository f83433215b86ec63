// ptxgym-runner: runs a candidate's TVM-FFI shared object in a process with no interpreter, no torch
// and no vendor library but the CUDA driver and runtime the candidate itself needs. It speaks the Python
// worker's protocol (ptxgym/evaluation/protocol.py): commands are the command models as JSON, replies are
// protocol.Reply JSON, so the trusted side validates them with the very same models. The wire format and
// the differences from the worker are described in ptxgym/evaluation/runner/__init__.py.
//
// Usage: ptxgym-runner --fd-in N --fd-out N --fd-sock N --parent-pid P [--device D] [--libcuda PATH]
//                      [--preload PATH]... [--host-blobs]
//   fd-in:   commands (trusted -> runner), 4-byte big-endian length + one JSON object;
//   fd-out:  replies (runner -> trusted), same framing (multiprocessing.Connection's); never stdout;
//   fd-sock: a Unix socket carrying the file descriptors an attach needs (SCM_RIGHTS); closed at the
//            sandbox command and before any candidate is loaded;
//   libcuda: the driver file to dlopen (the one the jail allows); preload: files dlopened before the
//            candidate (its libcudart, by exact path, so its DT_NEEDED soname is already satisfied);
//   host-blobs: the CPU test path, runs are memfds mapped in host memory (host_blob.h).
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <tvm/ffi/c_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "confine.h"
#include "cuda_path.h"
#include "host_blob.h"
#include "json.h"
#include "report.h"

#if defined(PTXGYM_RUNNER_CUPTI) && defined(PTXGYM_RUNNER_CUDA) && __has_include("cupti_path.h")
#include "cupti_path.h"
#define PTXR_WITH_CUPTI 1
#endif

namespace ptxrunner {

constexpr const char* kVersion = "0.2";
constexpr uint32_t kMaxCommand = 1u << 20;  // a longer command is refused (the runner exits)
constexpr size_t kMaxError = 4000;          // characters of an error text kept in a reply
constexpr size_t kMaxSassRows = 200000;     // protocol.MAX_SASS_ROWS
constexpr int64_t kMaxSpinUs = 50000;  // protocol.MAX_SPIN_US
constexpr int kMaxFds = 250;                // file descriptors one attach may carry (SCM_MAX_FD 253)

// ------------------------------------------------------------------------------------------ framing

bool read_full(int fd, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n) {
    ssize_t got = read(fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

void write_full(int fd, const std::string& data) {
  const char* p = data.data();
  size_t n = data.size();
  while (n) {
    ssize_t put = write(fd, p, n);
    if (put <= 0) _exit(3);  // the trusted side is gone
    p += put;
    n -= static_cast<size_t>(put);
  }
}

// One framed message, or false at end of input. An oversized command ends the runner (exit 4).
bool read_message(int fd, std::string* out) {
  unsigned char head[4];
  if (!read_full(fd, head, 4)) return false;
  uint32_t n = (uint32_t(head[0]) << 24) | (uint32_t(head[1]) << 16) | (uint32_t(head[2]) << 8) | head[3];
  if (n > kMaxCommand) {
    std::fprintf(stderr, "ptxgym-runner: a command of %u bytes exceeds %u\n", n, kMaxCommand);
    std::exit(4);
  }
  out->assign(n, '\0');
  return read_full(fd, &(*out)[0], n);
}

void send_message(int fd, const std::string& body) {
  uint32_t n = static_cast<uint32_t>(body.size());
  std::string frame = {char(n >> 24), char(n >> 16), char(n >> 8), char(n)};
  write_full(fd, frame + body);
}

// Exactly `want` file descriptors sent with one byte over a Unix socket (30 s to arrive).
std::vector<int> receive_fds(int sock, size_t want) {
  if (sock < 0) throw std::runtime_error("the fd socket is closed (sandbox applied or candidate loaded)");
  if (want == 0 || want > kMaxFds)
    throw std::runtime_error("an attach carries 1 to " + std::to_string(kMaxFds) + " fds");
  pollfd pfd = {sock, POLLIN, 0};
  if (poll(&pfd, 1, 30000) != 1) throw std::runtime_error("no file descriptors arrived within 30 s");
  char byte;
  iovec iov = {&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1) throw std::runtime_error("the fd socket broke");
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
  if (fds.size() != want) {
    for (int fd : fds) close(fd);
    throw std::runtime_error("expected " + std::to_string(want) + " fd(s) with the attach, got " +
                             std::to_string(fds.size()));
  }
  return fds;
}

double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Poll `fd` until it has input or `us` microseconds have passed (0: return at once), so that a command
// sent within that time is read without the wake-up of a blocked thread (TrialBegin.spin_us: an
// experiment on the calibrated overhead's spread; the caller then reads, blocking as ever).
void spin_for(int fd, int64_t us) {
  if (us <= 0) return;
  double until = now_ms() + us / 1e3;
  pollfd pfd = {fd, POLLIN, 0};
  while (poll(&pfd, 1, 0) == 0 && now_ms() < until) {
  }
}

// The walls of consecutive steps (an attach's and a call's reports: diagnostic only). Each call of the
// clock closes the step that ended now, taking only a clock reading (no formatting inside a call's timed
// region); json() writes them as an object of step name -> ms.
struct PhaseClock {
  static constexpr int kMax = 10;
  const char* names[kMax] = {};
  double ms[kMax] = {};
  int n = 0;
  double t = now_ms();
  void operator()(const char* name) {  // the wall since the last phase; the same name again adds to it
    double now = now_ms();
    if (n > 0 && std::strcmp(names[n - 1], name) == 0) {
      ms[n - 1] += now - t;
    } else if (n < kMax) {
      names[n] = name, ms[n++] = now - t;
    }
    t = now;
  }
  JsonWriter json() const {
    JsonWriter out;
    for (int i = 0; i < n; ++i) out.real(names[i], ms[i]);
    return out;
  }
};

struct Options {
  int in = -1, out = -1, sock = -1, device = 0;
  long parent = 0;
  bool host_blobs = false;
  std::string libcuda = "libcuda.so.1";
  std::vector<std::string> preload;
  double started_ms = 0;
};

// An error reply's text and the context's sticky error (a failed command never ends the runner).
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ------------------------------------------------------------------------------------------ runner

class Runner {
 public:
  explicit Runner(const Options& o) : o_(o), sock_(o.sock) {}

  int serve() {
    JsonWriter hello;
    hello.num("pid", getpid()).num("device", o_.device).real("warm_s", (now_ms() - o_.started_ms) / 1e3);
    hello.text("torch", "").null("context_id").text("runner", kVersion);
    send_message(o_.out, JsonWriter().num("seq", 0).boolean("ok", true).object("hello", hello).str());
    std::string text;
    int64_t expected = 1;
    for (;;) {
      spin_for(o_.in, spin_us_);  // in a trial that asked for it (TrialBegin.spin_us)
      if (!read_message(o_.in, &text)) break;
      int64_t seq = expected;
      std::string op;
      JsonWriter reply;
      try {
        Json cmd = JsonReader(text).parse();
        seq = cmd.at("seq").as_int("seq");
        op = cmd.at("op").as_str("op");
        reply = dispatch(op, cmd);
      } catch (const std::exception& e) {
        reply = failure(e.what());
      }
      expected = seq + 1;
      send_message(o_.out, JsonWriter().num("seq", seq).merge(reply).str());
      if (op == "exit") return 0;
    }
    return 0;  // the trusted side closed the command channel
  }

 private:
  Options o_;
  int sock_;
  enum class Subject { kNone, kNoop, kSo } subject_ = Subject::kNone;
  int64_t busy_ = 0;  // the no-op's memsets of the flush buffer per call (Load.busy_memsets)
  int64_t spin_us_ = 0;  // in a trial: how long to poll for the next command before blocking (TrialBegin)
  void* lib_ = nullptr;
  TVMFFISafeCallType fn_ = nullptr;
  std::vector<std::unique_ptr<ArgSet>> sets_;
  std::unique_ptr<HostBlob> host_;
  bool sandboxed_ = false;
  bool jailed_here_ = false;  // confined by the sandbox command (confine.h), not by a launcher before exec
  bool cupti_ = false;
  bool runtime_ready_ = false;
  bool hw_ready_ = false;  // the counter availability was queried with success (prepare_hw_counters)
  static constexpr int64_t kHwPrepareMaxAttempts = 8;  // prepare_hw_counters_patiently
#ifdef PTXGYM_RUNNER_CUDA
  Cuda cuda_;
  std::unique_ptr<Device> dev_;
  std::unique_ptr<GpuBlob> gpu_;
#endif

  std::string sticky_error() const {
#ifdef PTXGYM_RUNNER_CUDA
    if (dev_) return cuda_.sticky_error();
#endif
    return "";
  }

  JsonWriter failure(const std::string& why) const {
    JsonWriter w;
    w.boolean("ok", false).text("error", why.substr(0, kMaxError));
    std::string sticky = sticky_error();
    if (!sticky.empty()) w.text("cuda_error", sticky.substr(0, kMaxError));
    return w;
  }

  static JsonWriter ok() { return JsonWriter().boolean("ok", true); }

  JsonWriter dispatch(const std::string& op, const Json& cmd) {
    if (op == "attach") return attach(cmd);
    if (op == "sandbox") return sandbox(cmd);
    if (op == "load") return load(cmd);
    if (op == "trial_begin") return trial_begin(cmd);
    if (op == "trial_end") return trial_end();
    if (op == "call") return call(cmd);
    if (op == "exit") return ok();
    throw std::runtime_error("unknown command '" + op + "'");
  }

  void close_fd_socket() {
    if (sock_ >= 0) close(sock_);  // the candidate never sees the fd channel
    sock_ = -1;
  }

  // ------------------------------------------------------------------------------------ attach

  JsonWriter attach(const Json& cmd) {
    if (subject_ == Subject::kSo) throw std::runtime_error("attach after the candidate's load is refused");
    if (!cmd.has("vmm") || cmd.at("vmm").kind == Json::kNull)
      throw std::runtime_error(
          "the native runner maps only guard-page blobs (Attach.vmm); a plain CUDA-IPC blob needs the "
          "Python worker (candidate_process 'python', or guard pages on)");
    const Json& vmm = cmd.at("vmm");
    int64_t total = vmm.at("total").as_int("vmm.total"), page = vmm.at("page").as_int("vmm.page");
    if (total <= 0 || page <= 0) throw std::runtime_error("vmm.total and vmm.page must be positive");
    Runs runs;
    for (const Json& r : vmm.at("runs").as_array("vmm.runs")) {
      int64_t off = r.at("offset").as_int("run.offset"), size = r.at("size").as_int("run.size");
      if (off < 0 || size <= 0 || off + size > total)
        throw std::runtime_error("a run needs offset >= 0, size > 0 and to end inside vmm.total");
      runs.emplace_back(size_t(off), size_t(size));
    }
    int64_t flush = cmd.at("flush_bytes").as_int("flush_bytes");
    if (flush < 0) throw std::runtime_error("flush_bytes must be >= 0");
    std::vector<int> fds = receive_fds(sock_, runs.size());
    sets_.clear();
    char* base = nullptr;
    DLDevice device{kDLCPU, 0};
    size_t flushed = 0;
    std::string cupti_error = "not requested";
    // the wall of each step, for AttachResult.phases_ms (a spare's warm-up, diagnostic only)
    PhaseClock phase;
    if (o_.host_blobs) {
      host_ = std::make_unique<HostBlob>(fds, size_t(total), runs);
      base = host_->base();
      if (cmd.at("cupti").b) cupti_error = "a host blob (the CPU test path) has no GPU activity to trace";
      phase("map");
    } else {
#ifdef PTXGYM_RUNNER_CUDA
      try {
        cuda_.open(o_.libcuda);
        if (!dev_) dev_ = std::make_unique<Device>(cuda_, o_.device);
        init_runtime();
      } catch (...) {
        for (int fd : fds) close(fd);
        throw;
      }
      phase("cuda");
      gpu_.reset();
      auto mapped = std::make_unique<GpuBlob>(cuda_);
      mapped->map(o_.device, fds, size_t(total), size_t(page), runs);
      gpu_ = std::move(mapped);
      base = gpu_->base();
      device = DLDevice{kDLCUDA, o_.device};
      phase("map");
      flushed = dev_->set_flush(size_t(flush));
      phase("flush");
      cupti_error = cmd.at("cupti").b ? start_cupti(cmd.has("module_census") && cmd.at("module_census").b)
                                      : "not requested";
      phase("cupti");
      bool prepare = cmd.has("hw_prepare") && cmd.at("hw_prepare").b;
      // a spare's warm-up (Attach.hw_prepare, up to Attach.hw_prepare_attempts tries): the failed tries
      // and their pauses are "hw_prepare_retried", the last try "hw_prepare" (or "hw_prepare_failed")
      int64_t attempts = 4;  // Attach.hw_prepare_attempts' default
      if (cmd.has("hw_prepare_attempts")) attempts = cmd.at("hw_prepare_attempts").as_int("hw_prepare_attempts");
      bool ready = !prepare || prepare_hw_counters_patiently(attempts, [&] { phase("hw_prepare_retried"); });
      phase(ready ? "hw_prepare" : "hw_prepare_failed");
      if (prepare && cmd.has("hw_warm") && cmd.at("hw_warm").b)  // EvalSettings.hw_warm_start
        phase(warm_hw_counters() ? "hw_warm" : "hw_warm_failed");
#else
      for (int fd : fds) close(fd);
      throw std::runtime_error("this runner was built without CUDA (no cuda.h): no GPU blobs");
#endif
    }
    sets_ = build_sets(cmd.at("sets"), base, runs, device);
    phase("sets");
    JsonWriter result;
    result.text("arena", cmd.at("arena").as_str("arena")).boolean("cupti", cupti_error.empty());
    result.text("cupti_error", cupti_error.substr(0, 500)).num("flush_bytes", int64_t(flushed));
    result.object("phases_ms", phase.json());
    return ok().object("attach", result);
  }

  // Open the preloaded libraries (the candidate's CUDA runtime) and initialise the runtime on the
  // device's primary context now, before any candidate exists, as torch has in the Python worker: a
  // runtime that cannot start in this process fails the attach (set-up), not the candidate.
  void init_runtime() {
    if (runtime_ready_) return;
    for (const std::string& lib : o_.preload) {
      void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (!h) throw std::runtime_error("cannot preload " + lib + ": " + dlerror());
      using SetDevice = int (*)(int);
      using Free = int (*)(void*);
      auto set_device = reinterpret_cast<SetDevice>(dlsym(h, "cudaSetDevice"));
      auto free_fn = reinterpret_cast<Free>(dlsym(h, "cudaFree"));
      if (!set_device || !free_fn) continue;  // not a CUDA runtime
      int rc = set_device(o_.device);
      if (rc == 0) rc = free_fn(nullptr);
      if (rc != 0)
        throw std::runtime_error("the CUDA runtime " + lib + " failed to start (cudaError " + std::to_string(rc) +
                                 ")");
    }
    runtime_ready_ = true;
  }

  // '' when CUPTI traces a probe activity, else why not (the evaluator then times with events).
  std::string start_cupti(bool module_census) {
#ifdef PTXR_WITH_CUPTI
    if (cupti_) return "";
    std::string err = cupti::start(module_census);
    if (!err.empty()) return err;
    cupti::begin();
    uint64_t t0 = cupti::now();
    dev_->noop();
    dev_->sync();
    cupti::window(0, t0, cupti::now());
    std::string json;
    err = cupti::end_json(&json);
    if (!err.empty()) return err;
    try {
      Json spans = JsonReader(json).parse().at("spans");
      if (!spans.has("0") || spans.at("0").kind == Json::kNull)
        return "CUPTI recorded no activity for a probe memset";
    } catch (const std::exception& e) {
      return std::string("CUPTI's span report did not parse: ") + e.what();
    }
    cupti_ = true;
    return "";
#else
    (void)module_census;
    return "this runner was built without CUPTI (cupti.h, libcupti or cupti_path.h missing at build time)";
#endif
  }

  // ----------------------------------------------------------------------------------- sandbox

  JsonWriter sandbox(const Json& cmd) {
    if (sandboxed_) throw std::runtime_error("the sandbox is already applied in this worker");
    const std::string& mode = cmd.at("mode").as_str("mode");
    if (mode != "on" && mode != "strict" && mode != "off")
      throw std::runtime_error("sandbox mode must be on, strict or off, got '" + mode + "'");
    close_fd_socket();
    bool every_thread = true;
    std::string threads_note;
    if (cmd.has("jail") && cmd.at("jail").kind == Json::kObject) {
      const Json& jail = cmd.at("jail");
      if (jail.has("hw_prepare") && jail.at("hw_prepare").b) prepare_hw_counters();
      std::string error = confine::apply(cmd.at("jail"), &every_thread, &threads_note);
      if (!error.empty()) throw std::runtime_error("the runner could not confine itself: " + error);
      jailed_here_ = true;
    }
    bool landlock_at_exec = false;
    if (cmd.has("jail") && cmd.at("jail").kind == Json::kObject && cmd.at("jail").has("landlock_at_exec"))
      landlock_at_exec = cmd.at("jail").at("landlock_at_exec").b;
    std::vector<Layer> layers = observe_layers(jailed_here_, every_thread, landlock_at_exec, threads_note);
    if (mode == "strict")
      for (const Layer& l : layers)
        if (l.state == "unavailable")
          throw std::runtime_error("strict sandbox: layer " + l.name + " is not in force (" + l.detail + ")");
    sandboxed_ = true;
    return ok().json("sandbox", sandbox_report_json(mode, layers));
  }

  // The range profiler's counter-availability query, made before the jail (cupti::hw_prepare): inside it
  // the query fails on the H200. Only in a runner built with CUPTI on a GPU (with or without activity
  // tracing: the hardware-counted call does not need it), at the attach when it says "hw_prepare": true
  // (a spare's warm-up, off the GPU turn: Attach.hw_prepare), else at the sandbox command when the jail
  // says so (the subject will be hardware-counted; ApplySandbox.hw_prepare); once it worked, not again.
  // A failure is kept for the hardware-counted call's error text, which then queries again itself.
  void prepare_hw_counters() {
#if defined(PTXR_WITH_CUPTI)
    if (!dev_ || host_ || hw_ready_) return;
    hw_ready_ = cupti::hw_prepare(dev_->context(), o_.device).empty();
#endif
  }

  // A spare's query (Attach.hw_prepare), tried up to `attempts` times (Attach.hw_prepare_attempts, 1 to 8)
  // 100 ms apart where it failed; `retried` is called after each failed try's pause (the attach's
  // "hw_prepare_retried" phase, one over them all: what the retries cost the spare's warm-up). With 4 tries no MHA forward
  // subject's sandbox step queried again in ten turns on an H100, where every third turn paid ~0.12 s
  // there with one try (gpu_cost_2026-12-07_s5*_h100.txt); why a first try fails is not known (a guess:
  // beside another runner's query or hardware-counted call). Whether it worked in the end.
  template <typename Retried>
  bool prepare_hw_counters_patiently(int64_t attempts, Retried retried) {
#if defined(PTXR_WITH_CUPTI)
    if (!dev_ || host_) return false;
    attempts = std::min<int64_t>(std::max<int64_t>(attempts, 1), kHwPrepareMaxAttempts);
    for (int64_t attempt = 1;; ++attempt) {
      prepare_hw_counters();
      if (hw_ready_ || attempt >= attempts) break;
      usleep(100 * 1000);
      retried();  // one phase over every failed try and pause (PhaseClock adds a repeated name up)
    }
    return hw_ready_;
#else
    (void)attempts;
    (void)retried;
    return false;
#endif
  }

  // Attach.hw_warm (EvalSettings.hw_warm_start): once the query worked, one hardware-counted cycle with no
  // call in it (cupti::hw_warm), on the spare's warm-up. Whether the range profiler was started (the
  // attach's phase says "hw_warm", else "hw_warm_failed").
  bool warm_hw_counters() {
#if defined(PTXR_WITH_CUPTI)
    return dev_ && !host_ && hw_ready_ && cupti::hw_warm(dev_->context(), o_.device);
#else
    return false;
#endif
  }

  // -------------------------------------------------------------------------------------- load

  JsonWriter load(const Json& cmd) {
    const std::string& kind = cmd.at("kind").as_str("kind");
    if (subject_ == Subject::kSo) throw std::runtime_error("a candidate is already loaded");
    if (kind == "noop") {
      busy_ = cmd.has("busy_memsets") ? cmd.at("busy_memsets").as_int("busy_memsets") : 0;
      if (busy_ < 0 || busy_ > 4096) throw std::runtime_error("busy_memsets must lie in [0, 4096]");
#ifdef PTXGYM_RUNNER_CUDA
      if (busy_ && !(dev_ && dev_->has_flush()))
        throw std::runtime_error("a busy no-op needs the attach's L2-flush buffer");
#endif
      subject_ = Subject::kNoop;
    } else if (kind == "so") {
      if (!sandboxed_)
        throw std::runtime_error(
            "refusing to load a candidate before the 'sandbox' command (its mode 'off' runs the "
            "candidate unsandboxed)");
      load_so(cmd.at("path").as_str("path"), cmd.at("entry").as_str("entry"));
    } else if (kind == "baseline") {
      throw std::runtime_error("the native runner loads candidates only: a library baseline runs in the "
                               "Python worker");
    } else {
      throw std::runtime_error("unknown load kind '" + kind + "'");
    }
#ifdef PTXGYM_RUNNER_CUDA
    if (dev_) dev_->zero_persisting_limit();
#endif
    return ok();
  }

  void load_so(const std::string& path, const std::string& entry) {
    if (entry.empty() || entry.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                 "0123456789_") != std::string::npos)
      throw std::runtime_error("entry must be a C identifier");
    close_fd_socket();
    for (const std::string& lib : o_.preload)
      if (!dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL))
        throw std::runtime_error("cannot preload " + lib + ": " + dlerror());
    std::string prefix = "loading '" + entry + "' failed: ";
    subject_ = Subject::kSo;  // from here candidate code may run (its ELF constructors), loaded or not
    lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) throw std::runtime_error(prefix + "dlopen: " + dlerror());
    std::string symbol = "__tvm_ffi_" + entry;
    fn_ = reinterpret_cast<TVMFFISafeCallType>(dlsym(lib_, symbol.c_str()));
    if (!fn_) throw std::runtime_error(prefix + "the shared object exports no " + symbol);
  }

  // ------------------------------------------------------------------------------------ trials

  JsonWriter trial_begin(const Json& cmd) {
    int64_t spin = cmd.has("spin_us") ? cmd.at("spin_us").as_int("spin_us") : 0;
    if (spin < 0 || spin > kMaxSpinUs) throw std::runtime_error("spin_us must be 0 to 50000");
    spin_us_ = spin;
#ifdef PTXGYM_RUNNER_CUDA
    if (dev_) dev_->zero_persisting_limit();
#endif
#ifdef PTXR_WITH_CUPTI
    if (cupti_ && (!cmd.has("cupti") || cmd.at("cupti").b)) cupti::begin();
#else
    (void)cmd;
#endif
    return ok();
  }

  JsonWriter trial_end() {
    spin_us_ = 0;
    std::string json = "{}";
#ifdef PTXR_WITH_CUPTI
    if (cupti_) {
      std::string err = cupti::end_json(&json);
      if (!err.empty()) throw std::runtime_error("CUPTI: " + err);
    }
#endif
    return ok().json("spans", json);
  }

  // ------------------------------------------------------------------------------------- calls

  // Run the subject once on `set`; throws the raised error's "Kind: message" if the call failed.
  void invoke(const ArgSet& set) {
    if (subject_ == Subject::kNoop) {
#ifdef PTXGYM_RUNNER_CUDA
      if (dev_) dev_->noop(busy_);
#endif
      return;
    }
    if (!fn_) throw std::runtime_error("no subject is loaded (a failed load, or none yet)");
    TVMFFIAny result;
    std::memset(&result, 0, sizeof result);
    result.type_index = kTVMFFINone;
    int rc = fn_(nullptr, set.args.data(), int32_t(set.args.size()), &result);
    if (rc != 0) throw Failure(raised_error());
    if (result.type_index >= kTVMFFIStaticObjectBegin) TVMFFIObjectDecRef(result.v_obj);
  }

  const ArgSet& chosen_set(const Json& cmd) const {
    if (subject_ == Subject::kNone) throw std::runtime_error("call before load");
    if (sets_.empty()) throw std::runtime_error("call before attach");
    int64_t k = cmd.at("set").as_int("set");
    if (k < 0 || size_t(k) >= sets_.size())
      throw std::runtime_error("input set " + std::to_string(k) + " does not exist (" +
                               std::to_string(sets_.size()) + " attached)");
    return *sets_[size_t(k)];
  }

  JsonWriter call(const Json& cmd) {
    const ArgSet& set = chosen_set(cmd);
    if (cmd.has("count") && cmd.at("count").b) return counted_call(set);
    if (cmd.has("hw_count") && cmd.at("hw_count").b)
      return hw_counted_call(set, !cmd.has("flush") || cmd.at("flush").b, cmd.at("seq").as_int("seq"),
                             cmd.has("timed") && cmd.at("timed").b);
    int64_t seq = cmd.at("seq").as_int("seq");
    bool flush = !cmd.has("flush") || cmd.at("flush").b;
    bool timed = cmd.has("timed") && cmd.at("timed").b;
    JsonWriter result;
#ifdef PTXGYM_RUNNER_CUDA
    if (dev_ && !host_) {
      // the wall of each step, for CallResult.phases_ms (protocol.CALL_PHASES; diagnostic only)
      PhaseClock phase;
      dev_->sync();
      phase("sync");
      if (flush) dev_->flush_l2();
      phase("flush");
      dev_->sync();
      phase("flushed");
#ifdef PTXR_WITH_CUPTI
      timed = timed && cupti_;
      uint64_t t_start = timed ? cupti::now() : 0;
#endif
      double h0 = now_ms();
      dev_->record(0);
      invoke(set);
      dev_->record(1);
      phase("launch");
      dev_->sync();
      double host_ms = now_ms() - h0;
      phase("kernel");
#ifdef PTXR_WITH_CUPTI
      if (timed) cupti::window(seq, t_start, cupti::now());
#endif
      dev_->record(2);
      dev_->wait(2);
      check_context();
      phase("after");
      result.real("ev_stream_ms", dev_->elapsed(0, 1)).real("ev_device_ms", dev_->elapsed(0, 2));
      result.real("host_ms", host_ms).object("phases_ms", phase.json());
      return ok().object("call", result);
    }
#endif
    (void)seq, (void)flush, (void)timed;
    double h0 = now_ms();  // the host test path: host time stands for the events too
    invoke(set);
    double host_ms = now_ms() - h0;
    result.real("ev_stream_ms", host_ms).real("ev_device_ms", host_ms).real("host_ms", host_ms);
    return ok().object("call", result);
  }

  JsonWriter counted_call(const ArgSet& set) {
    std::string rows = "null", error;
    bool ran = false;
#if defined(PTXR_WITH_CUPTI)
    if (dev_ && !host_) {
      dev_->sync();
      std::string json, raised;
      error = cupti::count_json(
          [&] {
            ran = true;
            try {  // no exception crosses CUPTI's code: it is rethrown after the counter is done
              invoke(set);
              dev_->sync();
            } catch (const std::exception& e) {
              raised = e.what();
            }
          },
          o_.device, kMaxSassRows, &json, &ran);
      if (!raised.empty()) throw Failure(raised);
      if (error.empty()) rows = json;
    } else {
      error = "a host blob (the CPU test path) has no GPU instructions to count";
    }
#else
    error = "this runner was built without CUPTI (cupti.h, libcupti or cupti_path.h missing at build time)";
#endif
    run_unless(ran, set);
    JsonWriter w = ok();
    w.json("counts", rows);
    if (!error.empty()) w.text("count_error", error.substr(0, 500));
    return w;
  }

  // One call under the range profiler's hardware counters (cupti_range.h); like counted_call, the call
  // runs whatever happens to the profiler, and an error of the profiler is hw_count_error, never counts.
  // The L2 is flushed before it as before a timed call (outside the profiled range), so the call meets
  // the cache state every timed call meets.
  // `window`: inside an activity trial, the call's CUPTI window is recorded under `seq` (its kernels join
  // the census; EvalSettings.hw_count_in_trial), as a timed call's is. The window spans the call only, not
  // the profiler's set-up and read-out around it: on the H200 a window over the whole command held the
  // range profiler's own kernel (WaitNs), a foreign kernel to the census.
  JsonWriter hw_counted_call(const ArgSet& set, bool flush, int64_t seq, bool window) {
    std::string counts = "null", error;
    bool ran = false;
#if defined(PTXR_WITH_CUPTI)
    if (dev_ && !host_) {
      dev_->sync();
      if (flush) dev_->flush_l2();
      dev_->sync();
      window = window && cupti_;
      uint64_t t_start = 0, t_end = 0;
      std::string json, raised;
      error = cupti::hw_count_json(
          [&] {
            try {  // no exception crosses CUPTI's code: it is rethrown after the profiler is done
              // the window holds the call alone: the profiler's own kernel (WaitNs, launched as the range
              // opens) is done before it begins, and what it launches as the range closes after it ends
              dev_->sync();
              if (window) t_start = cupti::now();
              invoke(set);
              dev_->sync();
              if (window) t_end = cupti::now();
            } catch (const std::exception& e) {
              raised = e.what();
              if (window && t_start && !t_end) t_end = cupti::now();
            }
          },
          dev_->context(), o_.device, &json, &ran);
      if (window && t_start) cupti::window(seq, t_start, t_end);
      if (!raised.empty()) throw Failure(raised);
      if (error.empty()) counts = json;
    } else {
      error = "HwCountError: a host blob (the CPU test path) has no GPU counters to read";
    }
#else
    (void)flush, (void)seq, (void)window;
    error = "HwCountError: this runner was built without CUPTI (cupti.h, libcupti or cupti_path.h missing at "
            "build time)";
#endif
    run_unless(ran, set);
    JsonWriter w = ok();
    w.json("hw_counts", counts);
    if (!error.empty()) w.text("hw_count_error", error.substr(0, 500));
    return w;
  }

  // The call of a counted command whose profiler did not run it (an error before the call): run it now,
  // so the step's calls stay what the candidate expects; then the context check every call gets.
  void run_unless(bool ran, const ArgSet& set) {
    if (!ran) {
      invoke(set);
#ifdef PTXGYM_RUNNER_CUDA
      if (dev_ && !host_) dev_->sync();
#endif
    }
    check_context();
  }

  // A context changed by the call (cudaDeviceReset, a context of its own) is an error reply.
  void check_context() const {
#ifdef PTXGYM_RUNNER_CUDA
    if (!dev_ || host_) return;
    long long now = cuda_.context_id(), before = dev_->context_id();
    if (before >= 0 && now != before)
      throw Failure("the CUDA context of the worker changed during the call (id " + std::to_string(before) +
                    " -> " + (now < 0 ? std::string("None") : std::to_string(now)) +
                    "): the candidate reset or replaced the device context (cudaDeviceReset?)");
#endif
  }

  // "Kind: message" of the error the call raised (TVM-FFI's thread-local error slot).
  static std::string raised_error() {
    TVMFFIObjectHandle err = nullptr;
    TVMFFIErrorMoveFromRaised(&err);
    if (!err) return "the call failed without raising an error";
    const TVMFFIErrorCell* cell = TVMFFIErrorGetCellPtr(err);
    std::string text = std::string(cell->kind.data, cell->kind.size) + ": " +
                       std::string(cell->message.data, std::min<size_t>(cell->message.size, kMaxError));
    TVMFFIObjectDecRef(err);
    return text;
  }
};

// ------------------------------------------------------------------------------------------- main

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "ptxgym-runner: %s\n", why);
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options o;
  o.started_ms = now_ms();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--host-blobs") {
      o.host_blobs = true;
      continue;
    }
    if (i + 1 >= argc) usage(("missing the value of " + a).c_str());
    const char* v = argv[++i];
    if (a == "--fd-in") o.in = std::atoi(v);
    else if (a == "--fd-out") o.out = std::atoi(v);
    else if (a == "--fd-sock") o.sock = std::atoi(v);
    else if (a == "--device") o.device = std::atoi(v);
    else if (a == "--parent-pid") o.parent = std::atol(v);
    else if (a == "--libcuda") o.libcuda = v;
    else if (a == "--preload") o.preload.push_back(v);
    else usage(("unknown option " + a).c_str());
  }
  if (o.in <= 2 || o.out <= 2) usage("--fd-in and --fd-out are required and must not be 0, 1 or 2");
  return o;
}

}  // namespace ptxrunner

int main(int argc, char** argv) {
  using namespace ptxrunner;
  Options o = parse_options(argc, argv);
  if (o.parent > 0) {  // die with the trusted thread that spawned us (as the Python worker does)
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != o.parent) return 70;
  }
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // the candidate's output reaches the log even if it crashes
  return Runner(o).serve();
}
