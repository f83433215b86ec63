// The sandbox report of a runner: what is really in force in this process, observed from inside it
// before any candidate code exists (the jail was applied by ptxgym/confine's launcher before exec).
// Layers as protocol.SandboxLayer: no_new_privs, network, filesystem, rlimits, environment.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "json.h"

extern char** environ;

namespace ptxrunner {

struct Layer {
  std::string name, state, detail;
};

// The value of a "Field:\t value" line of /proc/self/status ('' if absent).
inline std::string status_field(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return "";
  char line[512];
  std::string want = std::string(field) + ":";
  std::string value;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, want.c_str(), want.size()) != 0) continue;
    value = line + want.size();
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t\n") + 1);
    break;
  }
  std::fclose(f);
  return value;
}

inline std::string limit_text(int resource) {
  rlimit r;
  if (getrlimit(resource, &r) != 0) return "?";
  return r.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(r.rlim_cur);
}

inline bool limited(int resource) {
  rlimit r;
  return getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY;
}

// jailed_here: confined by the sandbox command (confine.h) after the CUDA set-up; every_thread: Landlock
// covers the threads that existed then (ABI 8, or each restricted itself: confine::restrict_others), else
// only the calling thread and what it starts; threads_note: what restrict_others did or missed.
inline std::vector<Layer> observe_layers(bool jailed_here = false, bool every_thread = true,
                                         bool landlock_at_exec = false, const std::string& threads_note = "") {
  std::vector<Layer> out;
  bool nnp = status_field("NoNewPrivs") == "1";
  out.push_back({"no_new_privs", nnp ? "active" : "unavailable",
                 nnp ? (jailed_here ? "set by the runner at the sandbox command" : "set by the launcher before exec")
                     : "NoNewPrivs is 0 in /proc/self/status"});
  bool filtered = status_field("Seccomp") == "2";
  int s = socket(AF_INET, SOCK_STREAM, 0);
  int err = errno;
  if (s >= 0) close(s);
  if (filtered && s < 0)
    out.push_back({"network", "active",
                   std::string("seccomp filter: socket() refused for every address family (AF_INET probe: ") +
                       strerror(err) + ")"});
  else
    out.push_back({"network", "unavailable", filtered ? "a probe AF_INET socket opened" : "no seccomp filter"});
  int fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
  err = errno;
  if (fd >= 0) close(fd);
  if (fd < 0 && err == EACCES && landlock_at_exec)
    out.push_back({"filesystem", "active",
                   "Landlock from exec on, before the driver started any thread (every thread inside it): "
                   "reads only the runner's files, its GPU driver files and scratch; writes only scratch "
                   "(probe: /etc/passwd refused)"});
  else if (fd < 0 && err == EACCES && jailed_here && !every_thread)
    out.push_back({"filesystem", "partial",
                   "Landlock from the sandbox command on, on the calling thread and every thread or process it "
                   "starts, not on all of the CUDA driver's earlier helper threads (" + threads_note +
                       "): reads only the runner's files, its GPU driver files and scratch; writes only scratch "
                       "(probe: /etc/passwd refused)"});
  else if (fd < 0 && err == EACCES)
    out.push_back({"filesystem", "active",
                   std::string(jailed_here ? "Landlock from the sandbox command on" : "Landlock from exec on") +
                       (threads_note.empty() ? "" : ", on every thread (" + threads_note + ")") +
                       ": reads only the runner's files, its GPU driver files and scratch; writes only scratch "
                       "(probe: /etc/passwd refused)"});
  else
    out.push_back({"filesystem", "unavailable",
                   fd >= 0 ? "a probe open of /etc/passwd succeeded" : std::string("probe: ") + strerror(err)});
  std::string limits = "core=" + limit_text(RLIMIT_CORE) + ", fsize=" + limit_text(RLIMIT_FSIZE) +
                       ", nofile=" + limit_text(RLIMIT_NOFILE) + ", nproc=" + limit_text(RLIMIT_NPROC);
  bool core_off = limit_text(RLIMIT_CORE) == "0";
  out.push_back({"rlimits", core_off && limited(RLIMIT_FSIZE) && limited(RLIMIT_NPROC) ? "active"
                            : core_off                                                   ? "partial"
                                                                                         : "unavailable",
                 limits});
  std::string names;
  size_t n = 0;
  for (char** e = environ; e && *e; ++e, ++n) {
    std::string kv = *e;
    names += (names.empty() ? "" : ", ") + kv.substr(0, kv.find('='));
  }
  out.push_back({"environment", "active", std::to_string(n) + " variable(s) set by the trusted side: " + names});
  return out;
}

// protocol.SandboxReport as JSON; with mode "off" every layer is reported off (the runner was not jailed).
inline std::string sandbox_report_json(const std::string& mode, const std::vector<Layer>& layers) {
  std::string items;
  for (const Layer& l : layers) {
    JsonWriter w;
    w.text("name", l.name).text("state", mode == "off" ? "off" : l.state).text("detail", l.detail);
    items += (items.empty() ? "" : ",") + w.str();
  }
  return JsonWriter().text("mode", mode).json("layers", "[" + items + "]").str();
}

}  // namespace ptxrunner
