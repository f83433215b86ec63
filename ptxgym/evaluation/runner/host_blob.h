// The CPU test path of a guard-page blob (--host-blobs): the runs arrive as memfds and are mapped shared
// at their offsets inside a reserved PROT_NONE range, so the holes between runs fault as the GPU blob's
// unmapped pages do. Only the CPU tests use it; the evaluator's runners import CUDA allocations.
#pragma once

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ptxrunner {

class HostBlob {
 public:
  HostBlob(std::vector<int> fds, size_t total, const std::vector<std::pair<size_t, size_t>>& runs) {
    struct Closer {
      std::vector<int>& fds;
      ~Closer() {
        for (int fd : fds) close(fd);
      }
    } closer{fds};
    size_t page = size_t(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap (reserve) failed: ") + strerror(errno));
    base_ = static_cast<char*>(p);
    total_ = total;
    try {
      map_runs(fds, runs, page);
    } catch (...) {
      munmap(base_, total_);
      throw;
    }
  }
  HostBlob(const HostBlob&) = delete;
  HostBlob& operator=(const HostBlob&) = delete;
  ~HostBlob() {
    if (base_) munmap(base_, total_);
  }
  char* base() const { return base_; }

 private:
  char* base_ = nullptr;
  size_t total_ = 0;

  void map_runs(const std::vector<int>& fds, const std::vector<std::pair<size_t, size_t>>& runs, size_t page) {
    for (size_t i = 0; i < runs.size(); ++i) {
      struct stat st;
      if (runs[i].first % page)
        throw std::runtime_error("a host run's offset is not a multiple of the page size");
      if (fstat(fds[i], &st) != 0 || size_t(st.st_size) < runs[i].second)
        throw std::runtime_error("a host run's memfd is smaller than the run");
      void* q = mmap(base_ + runs[i].first, runs[i].second, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                     fds[i], 0);
      if (q == MAP_FAILED) throw std::runtime_error(std::string("mmap (run) failed: ") + strerror(errno));
    }
  }
};

}  // namespace ptxrunner
