// Test driver for the runner's jail on threads started before it (runner/confine.h, restrict_others).
// tests/evaluation/test_runner_jail_threads.py builds it with g++.
//   driver THREADS TARGET   stdin: the jail JSON (as runner/jail.py sends it in the sandbox command)
// THREADS names the threads started before the jail: "plain" (blocks no signal), "blocking" (blocks every
// signal glibc lets it block), "rawblock" (every signal, glibc's own 32 and 33 too, through the raw
// system call), comma-separated, or "none"; "handlers" among them installs handlers of its own on signal
// 32 and SIGRTMIN+3 before the jail and prints "handlers kept" or "handlers lost" after it (the broadcast
// borrows both). After the jail each thread and the caller open TARGET for reading. One line each:
// "<name> ok" or "<name> <errno text>", then "all_threads 0|1", "note <text>" and "error <text>" (the
// jail's error, empty when it applied).
#include <pthread.h>

#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "confine.h"
#include "json.h"

using namespace ptxrunner;

static std::atomic<int> go{0};

struct Probe {
  std::string name;
  std::atomic<int> result{-1};  // -1 not yet, 0 opened, else errno
};

static void wait_then_open(Probe* p, const char* target) {
  if (p->name == "blocking") {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
  }
  if (p->name == "rawblock") {
    uint64_t all = ~0ull;
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, nullptr, sizeof all);
  }
  while (!go.load()) {
    timespec pause{0, 1000000};
    nanosleep(&pause, nullptr);
  }
  int fd = open(target, O_RDONLY | O_CLOEXEC);
  p->result.store(fd >= 0 ? 0 : errno);
  if (fd >= 0) close(fd);
}

static std::string outcome(int result) { return result == 0 ? "ok" : strerror(result); }

static std::atomic<int> own_handler_ran{0};
static void own_handler(int) { own_handler_ran.fetch_add(1); }

using KAction = confine::broadcast::KernelAction;

// own_handler on SIGRTMIN+3 (sigaction) and on 32 (the raw call, glibc's restorer borrowed)
static void install_own_handlers() {
  struct sigaction act {};
  act.sa_handler = own_handler;
  sigemptyset(&act.sa_mask);
  sigaction(SIGRTMIN + 3, &act, nullptr);
  KAction k{};
  syscall(SYS_rt_sigaction, SIGRTMIN + 3, nullptr, &k, sizeof k.mask);
  syscall(SYS_rt_sigaction, 32, &k, nullptr, sizeof k.mask);
}

// both still ours, and SIGRTMIN+3 still runs it
static bool own_handlers_kept() {
  KAction k{};
  syscall(SYS_rt_sigaction, 32, nullptr, &k, sizeof k.mask);
  struct sigaction donor {};
  sigaction(SIGRTMIN + 3, nullptr, &donor);
  raise(SIGRTMIN + 3);
  return k.handler == own_handler && donor.sa_handler == own_handler && own_handler_ran.load() == 1;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  std::stringstream text;
  text << std::cin.rdbuf();
  std::string jail_text = text.str();
  Json jail = JsonReader(jail_text).parse();
  std::vector<std::unique_ptr<Probe>> probes;
  std::vector<std::thread> threads;
  std::stringstream names(argv[1]);
  bool handlers = false;
  for (std::string name; std::getline(names, name, ',');) {
    if (name == "none") continue;
    if (name == "handlers") {
      handlers = true;
      install_own_handlers();
      continue;
    }
    probes.push_back(std::make_unique<Probe>());
    probes.back()->name = name;
    threads.emplace_back(wait_then_open, probes.back().get(), argv[2]);
  }
  timespec settle{0, 50000000};  // let the blocking thread block before the jail
  nanosleep(&settle, nullptr);
  bool all_threads = false;
  std::string note;
  std::string error = confine::apply(jail, &all_threads, &note);
  go.store(1);
  for (std::thread& t : threads) t.join();
  int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
  std::cout << "main " << outcome(fd >= 0 ? 0 : errno) << "\n";
  for (const auto& p : probes) std::cout << p->name << " " << outcome(p->result.load()) << "\n";
  if (handlers) std::cout << "handlers " << (own_handlers_kept() ? "kept" : "lost") << "\n";
  std::cout << "all_threads " << (all_threads ? 1 : 0) << "\nnote " << note << "\nerror " << error << "\n";
  return 0;
}
