// ptxgym-runner: runs a candidate's TVM-FFI shared object in a process with no interpreter, no torch
// and no vendor library. The wire format is described in ptxgym/evaluation/runner/__init__.py.
//
// Usage: ptxgym-runner --fd-in N --fd-out N --fd-sock N
//   fd-in:   commands (trusted -> runner), 4-byte big-endian length + one JSON object;
//   fd-out:  replies (runner -> trusted), same framing; never stdout, so the candidate's output (stdout
//            and stderr, captured by the trusted side) cannot reach the reply channel by accident;
//   fd-sock: a Unix socket carrying the file descriptors an attach needs (SCM_RIGHTS); closed before
//            any candidate is loaded.
// Built with PTXGYM_RUNNER_CUDA the GPU path of cuda_path.h is compiled in (UNTESTED ON A GPU).
#include <dlfcn.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <tvm/ffi/c_api.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_path.h"
#include "json.h"

namespace ptxrunner {

constexpr const char* kVersion = "0.1";
constexpr uint32_t kMaxCommand = 1u << 20;  // a longer command is refused (the runner exits)
constexpr size_t kMaxError = 4000;          // characters of an error text kept in a reply
constexpr int kMaxFds = 64;                 // file descriptors one attach may carry

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

// Up to `want` file descriptors sent with one byte over a Unix socket (30 s to arrive).
std::vector<int> receive_fds(int sock, size_t want) {
  if (sock < 0) throw std::runtime_error("the fd socket is closed (a candidate was loaded)");
  if (want == 0 || want > kMaxFds) throw std::runtime_error("an attach carries 1 to 64 fds");
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

// ------------------------------------------------------------------------------------------ dtypes

DLDataType parse_dtype(const std::string& name) {
  struct Entry {
    const char* name;
    uint8_t code, bits;
  };
  static const Entry kTable[] = {
      {"float32", kDLFloat, 32},  {"float16", kDLFloat, 16},  {"float64", kDLFloat, 64},
      {"bfloat16", kDLBfloat, 16}, {"int8", kDLInt, 8},        {"int16", kDLInt, 16},
      {"int32", kDLInt, 32},      {"int64", kDLInt, 64},      {"uint8", kDLUInt, 8},
      {"bool", kDLBool, 8},       {"float8_e4m3fn", kDLFloat8_e4m3fn, 8},
      {"float8_e5m2", kDLFloat8_e5m2, 8},
  };
  for (const Entry& e : kTable)
    if (name == e.name) return DLDataType{e.code, e.bits, 1};
  throw std::runtime_error("unknown dtype '" + name + "'");
}

double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// ------------------------------------------------------------------------------------------ runner

class Runner {
 public:
  Runner(int in, int out, int sock) : in_(in), out_(out), sock_(sock) {}

  int serve() {
    send_message(out_, JsonWriter().num("seq", 0).boolean("ok", true).object(
                           "hello", JsonWriter().num("pid", getpid()).text("version", kVersion)).str());
    std::string text;
    while (read_message(in_, &text)) {
      int64_t seq = -1;
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
      send_message(out_, JsonWriter().num("seq", seq).merge(reply).str());
      if (op == "exit") return 0;
    }
    return 0;  // the trusted side closed the command channel
  }

 private:
  int in_, out_, sock_;
  void* lib_ = nullptr;
  TVMFFISafeCallType fn_ = nullptr;
  char* cpu_base_ = nullptr;
  size_t cpu_size_ = 0;
  std::vector<std::pair<size_t, size_t>> runs_;  // GPU blob: mapped (offset, size) runs
#ifdef PTXGYM_RUNNER_CUDA
  Cuda cuda_;
  std::unique_ptr<GpuBlob> gpu_;
#endif

  static JsonWriter failure(const std::string& why) {
    return JsonWriter().boolean("ok", false).text("error", why.substr(0, kMaxError));
  }

  JsonWriter dispatch(const std::string& op, const Json& cmd) {
    if (op == "attach") return attach(cmd);
    if (op == "load") return load(cmd);
    if (op == "call") return call(cmd);
    if (op == "exit") return JsonWriter().boolean("ok", true);
    throw std::runtime_error("unknown op '" + op + "'");
  }

  JsonWriter attach(const Json& cmd) {
    if (fn_) throw std::runtime_error("attach after load is refused");
    const Json& blob = cmd.at("blob");
    const std::string& kind = blob.at("kind").as_str("blob.kind");
    if (kind == "memfd") return attach_memfd(blob);
    if (kind == "vmm") return attach_vmm(blob);
    throw std::runtime_error("unknown blob kind '" + kind + "'");
  }

  JsonWriter attach_memfd(const Json& blob) {
    int64_t size = blob.at("size").as_int("blob.size");
    if (size <= 0) throw std::runtime_error("blob.size must be positive");
    int fd = receive_fds(sock_, 1)[0];
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < size) {
      close(fd);
      throw std::runtime_error("the memfd is smaller than blob.size");
    }
    void* p = mmap(nullptr, size_t(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap failed: ") + strerror(errno));
    drop_blobs();
    cpu_base_ = static_cast<char*>(p);
    cpu_size_ = size_t(size);
    runs_ = {{0, cpu_size_}};
    return JsonWriter().boolean("ok", true).object("attach", JsonWriter().text("device", "cpu"));
  }

  // Forget the attached blob (a new attach replaces it).
  void drop_blobs() {
    if (cpu_base_) munmap(cpu_base_, cpu_size_);
    cpu_base_ = nullptr;
    cpu_size_ = 0;
    runs_.clear();
#ifdef PTXGYM_RUNNER_CUDA
    gpu_.reset();
#endif
  }

  JsonWriter attach_vmm(const Json& blob) {
    std::vector<std::pair<size_t, size_t>> runs;
    for (const Json& r : blob.at("runs").as_array("blob.runs")) {
      int64_t off = r.at("offset").as_int("run.offset"), size = r.at("size").as_int("run.size");
      if (off < 0 || size <= 0) throw std::runtime_error("a run needs offset >= 0 and size > 0");
      runs.emplace_back(size_t(off), size_t(size));
    }
#ifdef PTXGYM_RUNNER_CUDA
    int64_t total = blob.at("total").as_int("blob.total"), page = blob.at("page").as_int("blob.page");
    int64_t device = blob.at("device").as_int("blob.device");
    for (auto& r : runs)
      if (r.first + r.second > size_t(total)) throw std::runtime_error("a run ends past blob.total");
    std::vector<int> fds = receive_fds(sock_, runs.size());
    drop_blobs();
    auto mapped = std::make_unique<GpuBlob>(cuda_);
    mapped->map(int(device), fds, size_t(total), size_t(page), runs);
    gpu_ = std::move(mapped);
    runs_ = runs;
    return JsonWriter().boolean("ok", true).object("attach", JsonWriter().text("device", "cuda"));
#else
    throw std::runtime_error("this runner was built without CUDA (no cuda.h): no vmm blobs");
#endif
  }

  JsonWriter load(const Json& cmd) {
    if (fn_) throw std::runtime_error("a subject is already loaded");
    const std::string& path = cmd.at("path").as_str("path");
    const std::string& entry = cmd.at("entry").as_str("entry");
    if (path.empty() || path[0] != '/') throw std::runtime_error("path must be absolute");
    if (entry.empty() || entry.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                 "0123456789_") != std::string::npos)
      throw std::runtime_error("entry must be a C identifier");
    if (sock_ >= 0) close(sock_);  // the candidate never sees the fd channel
    sock_ = -1;
    lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) throw std::runtime_error(std::string("dlopen failed: ") + dlerror());
    std::string symbol = "__tvm_ffi_" + entry;
    fn_ = reinterpret_cast<TVMFFISafeCallType>(dlsym(lib_, symbol.c_str()));
    if (!fn_) throw std::runtime_error("the shared object exports no " + symbol);
    return JsonWriter().boolean("ok", true);
  }

  // A view of the attached blob checked to lie inside one mapped run.
  void* view(int64_t offset, size_t nbytes) const {
    for (auto& r : runs_)
      if (offset >= 0 && size_t(offset) >= r.first && size_t(offset) - r.first <= r.second &&
          nbytes <= r.second - (size_t(offset) - r.first))
        return base() + offset;
    throw std::runtime_error("tensor at offset " + std::to_string(offset) + " (" + std::to_string(nbytes) +
                             " bytes) is not inside a mapped run of the blob");
  }

  char* base() const {
#ifdef PTXGYM_RUNNER_CUDA
    if (gpu_) return static_cast<char*>(gpu_->base());
#endif
    return cpu_base_;
  }

  DLDevice device() const {
#ifdef PTXGYM_RUNNER_CUDA
    if (gpu_) return DLDevice{kDLCUDA, gpu_->device()};
#endif
    return DLDevice{kDLCPU, 0};
  }

  JsonWriter call(const Json& cmd) {
    if (!fn_) throw std::runtime_error("call before load");
    if (runs_.empty()) throw std::runtime_error("call before attach");
    const auto& list = cmd.at("args").as_array("args");
    std::vector<DLTensor> tensors(list.size());
    std::vector<std::vector<int64_t>> shapes(list.size());
    std::vector<TVMFFIAny> args(list.size());
    for (size_t k = 0; k < list.size(); ++k) build_arg(list[k], &tensors[k], &shapes[k], &args[k]);
    TVMFFIAny result;
    std::memset(&result, 0, sizeof result);
    result.type_index = kTVMFFINone;
    int rc = 0;
    auto invoke = [&] { rc = fn_(nullptr, args.data(), int32_t(args.size()), &result); };
    JsonWriter timing;
    double h0 = now_ms();
#ifdef PTXGYM_RUNNER_CUDA
    if (gpu_) {
      timing.real("ev_ms", gpu_->timed(invoke));
    } else {
      invoke();
    }
#else
    invoke();
#endif
    timing.real("host_ms", now_ms() - h0);
    if (rc != 0) return failure(raised_error());
    if (result.type_index >= kTVMFFIStaticObjectBegin) TVMFFIObjectDecRef(result.v_obj);
    return JsonWriter().boolean("ok", true).object("call", timing);
  }

  void build_arg(const Json& a, DLTensor* t, std::vector<int64_t>* shape, TVMFFIAny* out) const {
    std::memset(out, 0, sizeof *out);
    const std::string& role = a.at("role").as_str("role");
    if (role == "scalar") {
      const Json& v = a.at("value");
      if (v.kind == Json::kBool) {
        out->type_index = kTVMFFIBool;
        out->v_int64 = v.b;
      } else if (v.kind == Json::kInt) {
        out->type_index = kTVMFFIInt;
        out->v_int64 = v.i;
      } else if (v.kind == Json::kFloat) {
        out->type_index = kTVMFFIFloat;
        out->v_float64 = v.f;
      } else {
        throw std::runtime_error("a scalar must be a bool, an integer or a float");
      }
      return;
    }
    if (role != "in" && role != "out") throw std::runtime_error("unknown role '" + role + "'");
    const std::string& dev = a.at("device").as_str("device");
    if (dev != (device().device_type == kDLCPU ? "cpu" : "cuda"))
      throw std::runtime_error("tensor device '" + dev + "' differs from the attached blob's");
    DLDataType dtype = parse_dtype(a.at("dtype").as_str("dtype"));
    size_t nbytes = dtype.bits / 8;
    for (const Json& d : a.at("shape").as_array("shape")) {
      int64_t n = d.as_int("a dimension");
      if (n < 0 || (n > 0 && nbytes > (size_t(1) << 48) / size_t(n)))
        throw std::runtime_error("a dimension is negative or the tensor is too large");
      nbytes *= size_t(n);
      shape->push_back(n);
    }
    std::memset(t, 0, sizeof *t);
    t->data = view(a.at("offset").as_int("offset"), nbytes);
    t->device = device();
    t->ndim = int32_t(shape->size());
    t->dtype = dtype;
    t->shape = shape->data();
    t->strides = nullptr;  // contiguous
    out->type_index = kTVMFFIDLTensorPtr;
    out->v_ptr = t;
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

int parse_fd(int argc, char** argv, const char* flag, bool required) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return std::atoi(argv[i + 1]);
  if (required) {
    std::fprintf(stderr, "ptxgym-runner: missing %s N\n", flag);
    std::exit(2);
  }
  return -1;
}

}  // namespace ptxrunner

int main(int argc, char** argv) {
  using namespace ptxrunner;
  int in = parse_fd(argc, argv, "--fd-in", true);
  int out = parse_fd(argc, argv, "--fd-out", true);
  int sock = parse_fd(argc, argv, "--fd-sock", false);
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // the candidate's output reaches the log even if it crashes
  if (in <= 2 || out <= 2) {
    std::fprintf(stderr, "ptxgym-runner: the channels must not be stdin, stdout or stderr\n");
    return 2;
  }
  return Runner(in, out, sock).serve();
}
