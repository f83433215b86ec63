// The trusted side's timed exchange with a worker (trusted/exchange.py, Session._call): one command
// frame out, its reply frame in, the trusted copies of the call's outputs queued and awaited, with the
// call's wall clock read here, around all of it. Called through ctypes, which lets go of the
// interpreter's lock for the whole call: a Python thread of the evaluator (an env's build, a trainer's
// step) can no longer lengthen the measured wall while the reply waits for the lock. Built by
// runner/build.py (build_exchange) into the cache beside the runner; no CUDA headers: the driver
// entry points it uses are looked up in the libcuda the process already has loaded.
//
// The copies run on a copy engine (cuMemcpyDtoDAsync) or, with `kernel` set, where every address and
// size is a multiple of 16 bytes, in a copy kernel on the SMs (kCopyPtx, JIT-compiled by the driver from
// PTX text once per context: ptxgym_exchange_kernel); the rest stays on the copy engine.
#include <dlfcn.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <mutex>

namespace {

using CopyFn = int (*)(unsigned long long, unsigned long long, size_t, void*);
using SyncFn = int (*)(void*);
using CtxGetCurrentFn = int (*)(void**);
using CtxGetDeviceFn = int (*)(int*);
using AttributeFn = int (*)(int*, int, int);
using ModuleLoadFn = int (*)(void**, const void*);
using GetFunctionFn = int (*)(void**, void*, const char*);
using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                         void**, void**);
CopyFn g_copy = nullptr;
SyncFn g_sync = nullptr;
CtxGetCurrentFn g_ctx = nullptr;
CtxGetDeviceFn g_ctx_device = nullptr;
AttributeFn g_attribute = nullptr;
ModuleLoadFn g_load = nullptr;
GetFunctionFn g_function = nullptr;
LaunchFn g_launch = nullptr;

constexpr int kSmCountAttribute = 16;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr unsigned kThreads = 256;
constexpr unsigned kBlocksPerSm = 8;

// dst[i] = src[i] for i < n16 16-byte words, grid-stride; the source read through the non-coherent path.
constexpr char kCopyPtx[] = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry ptxgym_copy16(.param .u64 dst, .param .u64 src, .param .u64 n16)
{
  .reg .pred %p;
  .reg .b32 %r<8>;
  .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [dst];
  ld.param.u64 %rd2, [src];
  ld.param.u64 %rd3, [n16];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  cvt.u64.u32 %rd5, %r3;
  mad.wide.u32 %rd4, %r1, %r2, %rd5;
  mov.u32 %r3, %nctaid.x;
  mul.wide.u32 %rd6, %r3, %r2;
LOOP:
  setp.ge.u64 %p, %rd4, %rd3;
  @%p bra DONE;
  shl.b64 %rd7, %rd4, 4;
  add.s64 %rd8, %rd2, %rd7;
  add.s64 %rd9, %rd1, %rd7;
  ld.global.nc.v4.u32 {%r4, %r5, %r6, %r7}, [%rd8];
  st.global.v4.u32 [%rd9], {%r4, %r5, %r6, %r7};
  add.s64 %rd4, %rd4, %rd6;
  bra LOOP;
DONE:
  ret;
}
)";

// The copy kernel of each context it was loaded in (a process's evaluators use a few devices at most).
struct Loaded {
  void* ctx = nullptr;
  void* fn = nullptr;
  unsigned blocks = 0;  // kBlocksPerSm x the device's SMs
};
constexpr int kContexts = 16;
Loaded g_loaded[kContexts];
std::mutex g_loaded_lock;

// The current context's copy kernel, loaded on first use; nullptr (and *code the driver's error, or -1
// when no context is current or the table is full) when it cannot be.
const Loaded* copy_kernel(int* code) {
  *code = 0;
  void* ctx = nullptr;
  if (!g_ctx || !g_ctx_device || !g_attribute || !g_load || !g_function || !g_launch) {
    *code = -1;
    return nullptr;
  }
  int c = g_ctx(&ctx);
  if (c != 0 || ctx == nullptr) {
    *code = c != 0 ? c : -1;
    return nullptr;
  }
  std::lock_guard<std::mutex> hold(g_loaded_lock);
  for (const Loaded& l : g_loaded)
    if (l.ctx == ctx) return &l;
  for (Loaded& l : g_loaded) {
    if (l.ctx != nullptr) continue;
    int device = 0, sms = 0;
    void* module = nullptr;
    void* fn = nullptr;
    if ((c = g_ctx_device(&device)) != 0 || (c = g_attribute(&sms, kSmCountAttribute, device)) != 0 ||
        (c = g_load(&module, kCopyPtx)) != 0 || (c = g_function(&fn, module, "ptxgym_copy16")) != 0) {
      *code = c;
      return nullptr;
    }
    l.fn = fn;
    l.blocks = kBlocksPerSm * static_cast<unsigned>(sms > 0 ? sms : 1);
    l.ctx = ctx;
    return &l;
  }
  *code = -1;
  return nullptr;
}

// One copy by the kernel (16-byte aligned and sized) or the copy engine; the driver's code.
int copy_one(uint64_t dst, uint64_t src, uint64_t bytes, void* stream, const Loaded* kernel) {
  if (kernel == nullptr || ((dst | src | bytes) & 15) != 0 || bytes == 0)
    return g_copy(dst, src, static_cast<size_t>(bytes), stream);
  uint64_t n16 = bytes / 16;
  uint64_t wanted = (n16 + kThreads - 1) / kThreads;
  unsigned blocks = wanted < kernel->blocks ? static_cast<unsigned>(wanted) : kernel->blocks;
  void* params[] = {&dst, &src, &n16};
  return g_launch(kernel->fn, blocks, 1, 1, kThreads, 1, 1, 0, stream, params, nullptr);
}

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
  kNoKernel = 11,     // the copy kernel asked for, but not loaded in the current context
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
  g_ctx = reinterpret_cast<CtxGetCurrentFn>(dlsym(lib, "cuCtxGetCurrent"));
  g_ctx_device = reinterpret_cast<CtxGetDeviceFn>(dlsym(lib, "cuCtxGetDevice"));
  g_attribute = reinterpret_cast<AttributeFn>(dlsym(lib, "cuDeviceGetAttribute"));
  g_load = reinterpret_cast<ModuleLoadFn>(dlsym(lib, "cuModuleLoadData"));
  g_function = reinterpret_cast<GetFunctionFn>(dlsym(lib, "cuModuleGetFunction"));
  g_launch = reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel"));
  return g_copy && g_sync ? 0 : -1;
}

// Loads the copy kernel into the calling thread's current context (once). 0 when it is there, else the
// driver's error code (-1: no libcuda entry points, no current context, or too many contexts).
extern "C" int ptxgym_exchange_kernel() {
  if (ptxgym_exchange_cuda() != 0) return -1;
  int code = 0;
  return copy_kernel(&code) != nullptr ? 0 : (code != 0 ? code : -1);
}

// One timed exchange. `frame`: the whole command frame (length prefix included). The reply's frame
// (multiprocessing.connection's: a big-endian int32 length, or -1 then a uint64) lands in `reply`, its
// length in *reply_len. The first reply byte is awaited `reply_timeout_s`, the rest of its frame until
// that deadline or `grace_s` after the first byte, whichever is later (pool.WorkerHandle.receive's
// rule); the write and the first reply byte share one deadline, `reply_timeout_s` after the start (the
// write no later than `write_timeout_s`). A reply already waiting before the write is refused (kAhead:
// one sent ahead by another thread of the worker would be taken for this command's). Then `copies`
// triples (destination, source, bytes) are queued on `stream` and awaited: with `kernel`, by the copy
// kernel where it can (ptxgym_exchange_kernel first: kNoKernel if it is not loaded in this context).
// times[0]: before the command's first byte; times[1]: the reply's last byte read; times[2]: the copies
// done (CLOCK_MONOTONIC seconds, as Python's time.monotonic).
extern "C" int ptxgym_timed_exchange(int cmd_fd, const uint8_t* frame, size_t frame_len, double write_timeout_s,
                                     int rep_fd, uint8_t* reply, size_t reply_cap, double reply_timeout_s,
                                     double grace_s, const uint64_t* copies, int ncopies, void* stream,
                                     int kernel, double* times, uint64_t* reply_len, int* cuda_code) {
  *reply_len = 0;
  *cuda_code = 0;
  if (ncopies > 0 && ptxgym_exchange_cuda() != 0) return kNoCuda;
  const Loaded* loaded = nullptr;
  if (ncopies > 0 && kernel) {
    loaded = copy_kernel(cuda_code);
    if (loaded == nullptr) return kNoKernel;
  }
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
    int c = copy_one(copies[3 * i], copies[3 * i + 1], copies[3 * i + 2], stream, loaded);
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
