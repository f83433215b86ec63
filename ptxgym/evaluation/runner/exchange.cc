// The trusted side's timed exchange with a worker (trusted/exchange.py, Session._call): one command
// frame out, its reply frame in, the trusted copies of the call's outputs queued and awaited, with the
// call's wall clock read here, around all of it. Called through ctypes, which lets go of the
// interpreter's lock for the whole call: a Python thread of the evaluator (an env's build, a trainer's
// step) can no longer lengthen the measured wall while the reply waits for the lock. Built by
// runner/build.py (build_exchange) into the cache beside the runner; no CUDA headers: the two driver
// entry points it uses are looked up in the libcuda the process already has loaded.
#include <dlfcn.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <ctime>

namespace {

using CopyFn = int (*)(unsigned long long, unsigned long long, size_t, void*);
using SyncFn = int (*)(void*);
CopyFn g_copy = nullptr;
SyncFn g_sync = nullptr;

// Status codes (trusted/exchange.py names them).
enum Status : int {
  kOk = 0,
  kWriteTimeout = 1,  // the command pipe stayed full
  kWriteError = 2,    // the worker stopped reading commands (EPIPE)
  kNoReply = 3,       // no byte of a reply within the call's time limit
  kStalled = 4,       // a reply began but its frame never completed
  kEof = 5,           // the reply channel ended
  kBadLength = 6,     // a frame length outside 0..cap
  kReadError = 7,     // poll or read failed otherwise
  kNoCuda = 8,        // copies asked for, but the driver's entry points were not found
  kCudaError = 9,     // a copy or the synchronisation failed (the driver's code in *cuda_code)
  kAhead = 10,        // a reply was waiting before the command was written
};

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// 1 when fd is ready for `events` before `deadline`, 0 at the deadline, -1 on an error.
int wait_fd(int fd, short events, double deadline) {
  for (;;) {
    double left = deadline - now_s();
    if (left <= 0) return 0;
    pollfd p{fd, events, 0};
    int ms = left > 60.0 ? 60000 : static_cast<int>(left * 1000.0) + 1;  // no overflow for huge limits
    int r = poll(&p, 1, ms);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return -1;
  }
}

int write_all(int fd, const uint8_t* data, size_t n, double deadline) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int r = wait_fd(fd, POLLOUT, deadline);
      if (r == 0) return kWriteTimeout;
      if (r < 0) return kWriteError;
      continue;
    }
    return kWriteError;
  }
  return kOk;
}

// Exactly n bytes by `deadline`; *got counts those read.
int read_all(int fd, uint8_t* out, size_t n, double deadline, size_t* got) {
  while (*got < n) {
    int r = wait_fd(fd, POLLIN, deadline);
    if (r == 0) return kStalled;
    if (r < 0) return kReadError;
    ssize_t k = read(fd, out + *got, n - *got);
    if (k == 0) return kEof;
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return kReadError;
    }
    *got += static_cast<size_t>(k);
  }
  return kOk;
}

uint64_t big_endian(const uint8_t* b, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | b[i];
  return v;
}

}  // namespace

// Looks the driver's copy and stream-synchronise entry points up in the loaded libcuda. 0 when found.
extern "C" int ptxgym_exchange_cuda() {
  if (g_copy && g_sync) return 0;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) return -1;
  g_copy = reinterpret_cast<CopyFn>(dlsym(lib, "cuMemcpyDtoDAsync_v2"));
  g_sync = reinterpret_cast<SyncFn>(dlsym(lib, "cuStreamSynchronize"));
  return g_copy && g_sync ? 0 : -1;
}

// One timed exchange. `frame`: the whole command frame (length prefix included). The reply's frame
// (multiprocessing.connection's: a big-endian int32 length, or -1 then a uint64) lands in `reply`, its
// length in *reply_len. The first reply byte is awaited `reply_timeout_s`, the rest of its frame until
// that deadline or `grace_s` after the first byte, whichever is later (pool.WorkerHandle.receive's
// rule); the write and the first reply byte share one deadline, `reply_timeout_s` after the start (the
// write no later than `write_timeout_s`). A reply already waiting before the write is refused (kAhead:
// one sent ahead by another thread of the worker would be taken for this command's). Then `copies`
// triples (destination, source, bytes) are queued on `stream` and awaited.
// times[0]: before the command's first byte; times[1]: the reply's last byte read; times[2]: the copies
// done (CLOCK_MONOTONIC seconds, as Python's time.monotonic).
extern "C" int ptxgym_timed_exchange(int cmd_fd, const uint8_t* frame, size_t frame_len, double write_timeout_s,
                                     int rep_fd, uint8_t* reply, size_t reply_cap, double reply_timeout_s,
                                     double grace_s, const uint64_t* copies, int ncopies, void* stream,
                                     double* times, uint64_t* reply_len, int* cuda_code) {
  *reply_len = 0;
  *cuda_code = 0;
  if (ncopies > 0 && ptxgym_exchange_cuda() != 0) return kNoCuda;
  pollfd waiting{rep_fd, POLLIN, 0};
  int ahead;
  do {
    ahead = poll(&waiting, 1, 0);
  } while (ahead < 0 && errno == EINTR);  // a signal must not skip the check
  if (ahead < 0) return kReadError;
  if (ahead > 0 && (waiting.revents & POLLIN)) return kAhead;
  double t0 = now_s();
  times[0] = t0;
  double deadline = t0 + reply_timeout_s;
  double write_by = t0 + (write_timeout_s < reply_timeout_s ? write_timeout_s : reply_timeout_s);
  int s = write_all(cmd_fd, frame, frame_len, write_by);
  if (s != kOk) return s;
  int r = wait_fd(rep_fd, POLLIN, deadline);
  if (r == 0) return kNoReply;
  if (r < 0) return kReadError;
  double later = now_s() + grace_s;
  if (later > deadline) deadline = later;
  uint8_t head[8];
  size_t got = 0;
  s = read_all(rep_fd, head, 4, deadline, &got);
  if (s != kOk) return s;
  int64_t size = static_cast<int32_t>(static_cast<uint32_t>(big_endian(head, 4)));
  if (size == -1) {
    got = 0;
    s = read_all(rep_fd, head, 8, deadline, &got);
    if (s != kOk) return s;
    uint64_t wide = big_endian(head, 8);
    if (wide > reply_cap) return kBadLength;
    size = static_cast<int64_t>(wide);
  }
  if (size < 0 || static_cast<uint64_t>(size) > reply_cap) return kBadLength;
  got = 0;
  s = read_all(rep_fd, reply, static_cast<size_t>(size), deadline, &got);
  if (s != kOk) return s;
  *reply_len = static_cast<uint64_t>(size);
  times[1] = now_s();
  for (int i = 0; i < ncopies; ++i) {
    int c = g_copy(copies[3 * i], copies[3 * i + 1], static_cast<size_t>(copies[3 * i + 2]), stream);
    if (c != 0) {
      *cuda_code = c;
      return kCudaError;
    }
  }
  if (ncopies > 0) {
    int c = g_sync(stream);
    if (c != 0) {
      *cuda_code = c;
      return kCudaError;
    }
  }
  times[2] = now_s();
  return kOk;
}
