// The runner confines itself at the `sandbox` command: after its CUDA driver, runtime and (optionally)
// CUPTI are initialised and the arena is attached, before any candidate code exists, as the Python worker
// does (sandboxed/sandbox.py). The trusted side sends the jail in the command (runner/jail.py builds it:
// the same rules ptxgym/confine's launcher would apply before exec). Measured on the H200: a runner
// jailed before exec could not initialise the driver (cuInit: CUDA_ERROR_OPERATING_SYSTEM), whichever
// layer was applied (bench/results/runner_jail_probe_*.txt).
//
// Order: rlimits; no_new_privs; Landlock (every file-system right the kernel's ABI knows is handled:
// read beneath `read`, read+execute beneath `execute`, write beneath `write`, read/write the `devices`
// files; TCP bind/connect denied from ABI 4; abstract Unix sockets and signals scoped from ABI 6; every
// thread from ABI 8; below it the calling thread, and every other thread from a signal handler,
// `restrict_others`); the seccomp socket filter (rows assembled by ptxgym/confine/seccomp.py) on every
// thread (TSYNC).
#pragma once
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dirent.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

#include "json.h"

namespace ptxrunner::confine {

constexpr uint64_t kExecute = 1ull << 0, kWriteFile = 1ull << 1, kReadFile = 1ull << 2, kReadDir = 1ull << 3;
constexpr uint64_t kRemoveDir = 1ull << 4, kRemoveFile = 1ull << 5, kMakeChar = 1ull << 6, kMakeDir = 1ull << 7;
constexpr uint64_t kMakeReg = 1ull << 8, kMakeSock = 1ull << 9, kMakeFifo = 1ull << 10, kMakeBlock = 1ull << 11;
constexpr uint64_t kMakeSym = 1ull << 12, kRefer = 1ull << 13, kTruncate = 1ull << 14, kIoctlDev = 1ull << 15;
constexpr uint64_t kRead = kReadFile | kReadDir;
constexpr uint64_t kFileRights = kExecute | kWriteFile | kReadFile | kTruncate | kIoctlDev;
constexpr uint64_t kDeviceRights = kReadFile | kWriteFile | kTruncate;
constexpr long kCreateRuleset = 444, kAddRule = 445, kRestrictSelf = 446;
constexpr uint32_t kRestrictSelfTsync = 1u << 3;

struct RulesetAttr {
  uint64_t handled_access_fs, handled_access_net, scoped;
};
struct __attribute__((packed)) PathBeneath {
  uint64_t allowed_access;
  int32_t parent_fd;
};

inline int landlock_abi() {
  long v = syscall(kCreateRuleset, nullptr, 0, 1u);
  return v > 0 ? static_cast<int>(v) : 0;
}

inline uint64_t write_rights(int abi) {
  uint64_t w = kWriteFile | kRemoveDir | kRemoveFile | kMakeChar | kMakeDir | kMakeReg | kMakeSock | kMakeFifo |
               kMakeBlock | kMakeSym;
  return w | (abi >= 2 ? kRefer : 0) | (abi >= 3 ? kTruncate : 0);
}

// Grant `rights` beneath `path` (file rights only on a file); a missing path is skipped.
inline std::string allow(int ruleset, uint64_t handled, const std::string& path, uint64_t rights) {
  int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? "" : "cannot open " + path + ": " + strerror(errno);
  struct stat st {};
  rights &= handled;
  if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) rights &= kFileRights;
  std::string error;
  if (rights) {
    PathBeneath rule{rights, fd};
    if (syscall(kAddRule, ruleset, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &rule, 0) != 0)
      error = "landlock_add_rule(" + path + "): " + strerror(errno);
  }
  // A rule is tied to an inode, and procfs makes a new one for an entry it evicted (memory pressure):
  // the descriptor of a /proc entry stays open for the runner's life, which keeps its inode.
  if (path.rfind("/proc/", 0) != 0) close(fd);
  return error;
}

inline std::vector<std::string> strings(const Json& rules, const char* key) {
  std::vector<std::string> out;
  if (rules.has(key))
    for (const Json& item : rules.at(key).as_array(key)) out.push_back(item.as_str(key));
  return out;
}

// Below Landlock ABI 8, landlock_restrict_self binds the calling thread only: the helper threads the CUDA
// driver and CUPTI started before the jail would stay outside it, and candidate code run on one of them (a
// signal handler sent there with tgkill, a host callback) could read and write anywhere. So each other
// thread restricts itself, in the handler of a signal sent to it (as glibc broadcasts set*id calls to
// every thread): no_new_privs, then the same ruleset. The signal is 32, which glibc's pthread_sigmask never
// blocks (it keeps 32 and 33 for itself), so a thread that blocks every signal it can still takes it; a
// candidate could reach such a thread the same way. Signal 32's earlier handler is put back afterwards
// (where there was none, on_signal stays, and without a ruleset does nothing). A thread that blocks the
// signal anyway (a raw rt_sigprocmask) stays outside and is named in the note, with its blocked-signal
// mask. (With glibc before 2.34, whose cancellation handler acts on any signal 32 from the process, a
// delivery still pending then would cancel that thread at its next cancellation point.)
namespace broadcast {
inline std::atomic<int> ruleset{-1};
constexpr int kMaxThreads = 4096;
inline std::atomic<pid_t> done[kMaxThreads];
inline std::atomic<int> n_done{0}, n_failed{0};
constexpr int kSignal = 32;  // glibc's SIGCANCEL, installed only by pthread_cancel (the runner never calls it)
constexpr int kDeadlineMs = 5000;

inline void on_signal(int) {
  int saved = errno;
  int fd = ruleset.load();
  bool ok = fd >= 0 && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && syscall(kRestrictSelf, fd, 0u) == 0;
  if (ok) {
    int i = n_done.fetch_add(1);
    if (i < kMaxThreads) done[i].store(static_cast<pid_t>(syscall(SYS_gettid)));
  } else {
    n_failed.fetch_add(1);
  }
  errno = saved;
}

// The process's threads; false when /proc/self/task cannot be read.
inline bool threads(std::vector<pid_t>* out) {
  out->clear();
  DIR* d = opendir("/proc/self/task");
  if (!d) return false;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') out->push_back(static_cast<pid_t>(atoi(e->d_name)));
  closedir(d);
  return true;
}

// Whether `tid` restricted itself among the first `seen` handler records (taken before the listing that
// names `tid`: a record written later could belong to a thread that started a thread since).
inline bool reached(pid_t tid, int seen) {
  for (int i = 0; i < std::min(seen, kMaxThreads); ++i)
    if (done[i].load() == tid) return true;
  return false;
}

inline std::string thread_text(pid_t tid) {
  std::string name = "?", blocked = "?";
  std::string path = "/proc/self/task/" + std::to_string(tid) + "/status";
  if (FILE* f = fopen(path.c_str(), "r")) {
    char line[256];
    while (fgets(line, sizeof line, f)) {
      std::string l(line);
      if (!l.empty() && l.back() == '\n') l.pop_back();
      if (l.rfind("Name:\t", 0) == 0) name = l.substr(6);
      if (l.rfind("SigBlk:\t", 0) == 0) blocked = l.substr(8);
    }
    fclose(f);
  }
  return std::to_string(tid) + " " + name + " (blocked " + blocked + ")";
}

// The kernel's struct sigaction (rt_sigaction's, not glibc's).
struct KernelAction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};

// The actions install() replaced, for restore().
struct Saved {
  int donor = 0;
  struct sigaction donor_action {};
  KernelAction signal_action{};
};

// on_signal as signal 32's handler. glibc's sigaction refuses its internal signals, so the raw call sets it,
// with the flags and return trampoline (SA_RESTORER) glibc gives the same handler on a real-time signal
// (the donor, never sent).
inline std::string install(Saved* saved) {
  struct sigaction act {};
  act.sa_handler = on_signal;
  act.sa_flags = SA_RESTART;
  sigemptyset(&act.sa_mask);
  KernelAction k{};
  saved->donor = SIGRTMIN + 3;
  if (sigaction(saved->donor, &act, &saved->donor_action) != 0 ||
      syscall(SYS_rt_sigaction, saved->donor, nullptr, &k, sizeof k.mask) != 0 ||
      sigaction(saved->donor, &saved->donor_action, nullptr) != 0 ||
      syscall(SYS_rt_sigaction, kSignal, &k, &saved->signal_action, sizeof k.mask) != 0)
    return std::string("installing the signal handler: ") + strerror(errno);
  return "";
}

// Signal 32's earlier action back, unless it was the default (a delivery still pending on a thread that
// blocks it would then end the process; on_signal stays, and without a ruleset it does nothing).
inline void restore(const Saved& saved) {
  if (saved.signal_action.handler != SIG_DFL)
    syscall(SYS_rt_sigaction, kSignal, &saved.signal_action, nullptr, sizeof saved.signal_action.mask);
}
}  // namespace broadcast

// Every thread but the caller restricts itself with `ruleset` (namespace broadcast); "" when all did, else
// what stayed outside. Each thread not yet signalled is signalled, again and again, until a listing of
// /proc/self/task finds none new and every signalled one has answered, or broadcast::kDeadlineMs pass.
// Called before the caller restricts itself (it reads /proc/self/task).
inline std::string restrict_others(int ruleset, int* restricted) {
  namespace b = broadcast;
  pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  pid_t pid = getpid();
  b::n_done.store(0);
  b::n_failed.store(0);
  b::ruleset.store(ruleset);
  b::Saved saved;
  std::string error = b::install(&saved);
  if (!error.empty()) {
    b::ruleset.store(-1);
    return error;
  }
  std::vector<pid_t> sent, now;
  for (int ms = 0;; ++ms) {
    if (!b::threads(&now)) {
      error = std::string("cannot list threads: ") + strerror(errno);
      break;
    }
    bool fresh = false;
    for (pid_t tid : now) {
      if (tid == self || std::find(sent.begin(), sent.end(), tid) != sent.end()) continue;
      if (syscall(SYS_tgkill, pid, tid, b::kSignal) == 0) sent.push_back(tid);
      fresh = true;
    }
    bool answered = b::n_done.load() + b::n_failed.load() >= static_cast<int>(sent.size());
    if ((!fresh && answered) || ms >= b::kDeadlineMs) break;
    timespec pause{0, 1000000};
    nanosleep(&pause, nullptr);
  }
  int seen = b::n_done.load();
  std::string outside;
  if (error.empty() && !b::threads(&now)) error = std::string("cannot list threads: ") + strerror(errno);
  for (pid_t tid : now)
    if (tid != self && !b::reached(tid, seen)) outside += (outside.empty() ? "" : ", ") + b::thread_text(tid);
  b::ruleset.store(-1);  // a later delivery fails without touching whatever reuses the number
  b::restore(saved);
  *restricted = seen;
  if (!error.empty()) return error;
  if (seen > b::kMaxThreads) outside += (outside.empty() ? "" : "; ") + std::string("more threads than recorded");
  if (b::n_failed.load()) outside += (outside.empty() ? "" : "; ") + std::to_string(b::n_failed.load()) + " failed";
  return outside;
}

// Landlock as the launcher's apply_landlock; "" or the error. *all_threads: every thread is restricted (ABI
// 8, or each other thread through restrict_others); *note: what restrict_others did, or what it missed.
inline std::string apply_landlock(const Json& rules, bool* all_threads, std::string* note) {
  int abi = landlock_abi();
  if (!abi) return "the kernel has no usable Landlock";
  uint64_t fs = kExecute | kRead | write_rights(abi);
  RulesetAttr attr{fs, abi >= 4 ? 3ull : 0ull, abi >= 6 ? 3ull : 0ull};
  size_t size = abi < 4 ? 8 : abi < 6 ? 16 : 24;
  long ruleset = syscall(kCreateRuleset, &attr, size, 0u);
  if (ruleset < 0) return std::string("landlock_create_ruleset: ") + strerror(errno);
  uint64_t special = kMakeChar | kMakeBlock | kMakeSock | kMakeFifo;
  const std::pair<const char*, uint64_t> grants[] = {
      {"read", kRead},
      {"execute", kRead | kExecute},
      {"write", kRead | (write_rights(abi) & ~special)},
      {"devices", kDeviceRights},
  };
  std::string error;
  for (const auto& [key, rights] : grants) {
    for (const std::string& path : strings(rules, key)) {
      error = allow(static_cast<int>(ruleset), fs, path, rights);
      if (!error.empty()) break;
    }
    if (!error.empty()) break;
  }
  bool others = true;
  if (error.empty() && abi < 8) {
    int restricted = 0;
    std::string outside = restrict_others(static_cast<int>(ruleset), &restricted);
    others = outside.empty();
    if (!others)
      *note = "outside Landlock: " + outside;
    else if (restricted)
      *note = std::to_string(restricted) + " earlier thread(s) restricted themselves";
  }
  if (error.empty()) {
    uint32_t flags = abi >= 8 ? kRestrictSelfTsync : 0u;
    if (syscall(kRestrictSelf, ruleset, flags) != 0) error = std::string("landlock_restrict_self: ") + strerror(errno);
    *all_threads = abi >= 8 || others;
  }
  close(static_cast<int>(ruleset));
  return error;
}

inline std::string apply_rlimits(const Json& limits) {
  const std::pair<const char*, int> names[] = {{"RLIMIT_CORE", RLIMIT_CORE},     {"RLIMIT_FSIZE", RLIMIT_FSIZE},
                                               {"RLIMIT_NOFILE", RLIMIT_NOFILE}, {"RLIMIT_NPROC", RLIMIT_NPROC},
                                               {"RLIMIT_AS", RLIMIT_AS},         {"RLIMIT_CPU", RLIMIT_CPU}};
  for (const auto& [name, value] : limits.fields) {
    int resource = -1;
    for (const auto& [known, r] : names)
      if (name == known) resource = r;
    if (resource < 0) return "unknown resource limit " + name;
    rlimit cur{};
    getrlimit(resource, &cur);
    rlim_t want = static_cast<rlim_t>(value.as_int("rlimit"));
    if (cur.rlim_max != RLIM_INFINITY && want > cur.rlim_max) want = cur.rlim_max;
    rlimit next{want, want};
    if (setrlimit(resource, &next) != 0) return "setrlimit(" + name + "): " + strerror(errno);
  }
  return "";
}

inline std::string apply_filter(const Json& rows) {
  std::vector<sock_filter> program;
  for (const Json& row : rows.as_array("filter")) {
    const auto& r = row.as_array("filter row");
    if (r.size() != 4) return "a seccomp row must have 4 fields";
    program.push_back({static_cast<uint16_t>(r[0].as_int("code")), static_cast<uint8_t>(r[1].as_int("jt")),
                       static_cast<uint8_t>(r[2].as_int("jf")), static_cast<uint32_t>(r[3].as_int("k"))});
  }
  if (program.empty()) return "an empty seccomp filter";
  sock_fprog prog{static_cast<unsigned short>(program.size()), program.data()};
  long ret = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
  if (ret < 0) return std::string("seccomp: ") + strerror(errno);
  if (ret > 0) return "seccomp: thread " + std::to_string(ret) + " could not take the filter";
  return "";
}

// Apply `jail` ({"rlimits": {...}, "landlock": {...} | null, "filter": [[code, jt, jf, k], ...] | null});
// "" or the first error (then the runner must not load a candidate). *all_threads, *note as apply_landlock.
inline std::string apply(const Json& jail, bool* all_threads, std::string* note) {
  *all_threads = false;
  std::string error = jail.has("rlimits") ? apply_rlimits(jail.at("rlimits")) : "";
  if (!error.empty()) return error;
  bool landlock = jail.has("landlock") && jail.at("landlock").kind == Json::kObject;
  bool filter = jail.has("filter") && jail.at("filter").kind == Json::kArray;
  if ((landlock || filter) && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return std::string("no_new_privs: ") + strerror(errno);
  if (landlock) {
    error = apply_landlock(jail.at("landlock"), all_threads, note);
    if (!error.empty()) return "Landlock: " + error;
  }
  if (filter) error = apply_filter(jail.at("filter"));
  return error;
}

}  // namespace ptxrunner::confine
