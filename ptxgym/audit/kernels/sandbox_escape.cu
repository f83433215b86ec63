// Hostile host code: on every call it tries to open a TCP connection to 127.0.0.1:47613 and to write
// marker files outside the worker's scratch directory (/tmp and $HOME), from the calling thread and from
// a thread it starts, then computes a correct GEMM. Each attempt that works spoils the output on purpose,
// so the verdict says what got out: a file written -> the output is never written (UNWRITTEN), a socket
// opened -> NaNs (NONFINITE). Under the host sandbox every attempt fails and the verdict is PASSED. The
// marker paths are listed in sandbox_escape_markers() of the test. Where HOME is the scratch directory (the
// native runner sets HOME = TMPDIR = scratch) a file there is not outside, so it is not tried.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "gemm_common.cuh"

constexpr int kPort = 47613;

static bool open_socket() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(kPort);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    (void)!write(fd, "escaped\n", 8);
  }
  close(fd);
  return true;
}

static bool write_file(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  (void)!write(fd, "escaped\n", 8);
  close(fd);
  return true;
}

static bool write_markers(const char* who) {
  bool any = write_file(std::string("/tmp/ptxgym-sandbox-escape-") + who + ".marker");
  const char* home = std::getenv("HOME");
  const char* tmp = std::getenv("TMPDIR");
  if (home && tmp && std::string(home) == tmp) home = nullptr;  // HOME is the scratch (native runner): not out
  if (home) {
    any |= write_file(std::string(home) + "/.ptxgym-sandbox-escape-" + who + ".marker");
  }
  return any;
}

void run(TensorView A, TensorView B, TensorView C) {
  bool net = open_socket();
  bool file = write_markers("main");
  std::thread other([&] {
    net |= open_socket();
    file |= write_markers("thread");
  });
  other.join();
  if (net || file) std::fprintf(stderr, "sandbox_escape: socket %d, file outside scratch %d\n", net, file);
  if (file) return;  // leaves the poisoned output as it is
  cudaStream_t s = caller_stream(A);
  launch_gemm(A, B, C, static_cast<int>(A.size(0)), s);
  if (net) cudaMemsetAsync(C.data_ptr(), 0xFF, C.numel() * sizeof(bf16), s);  // 0xFFFF is a bf16 NaN
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
