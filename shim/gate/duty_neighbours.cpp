#include "shim/gate/duty_neighbours.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>

#include "shm/layout.hpp"
#include "shm/run_dir_layout.hpp"

namespace cushare::shim {
namespace {

struct Watched {
  DutyNeighbour who;
  int fd = -1;
};

struct GpuNeighbours {
  std::vector<Watched> watched;
};

// Constructed in place so that a fork child can start over with a free lock.
alignas(std::mutex) std::byte g_lock_storage[sizeof(std::mutex)];
std::mutex& lock() noexcept {
  static std::mutex* m = new (g_lock_storage) std::mutex;
  return *m;
}
std::array<GpuNeighbours, shm::kMaxGpus> g_neighbours;

// A claim's id names a folder under RUN/alloc: one plain component.
bool plain_name(const std::string& id) {
  return !id.empty() && id != "." && id != ".." && id.find('/') == std::string::npos;
}

int open_usage(const std::filesystem::path& alloc_dir, const DutyNeighbour& n) {
  if (!plain_name(n.alloc_id) || n.gpu_index >= shm::kMaxGpus) return -1;
  const auto path = alloc_dir / n.alloc_id / shm::kUsageName;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat sb {};
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether no process of the neighbour has work on its entry of the GPU;
// false where that cannot be read (a short or failed read). Its threads
// waiting at its gate do not count: an owner that spent its budget waits
// there, and so does a neighbour waiting to borrow.
bool idle(const Watched& w) {
  std::uint32_t busy = 0;
  const off_t at = static_cast<off_t>(offsetof(shm::UsageRegion, gpus) +
                                      w.who.gpu_index * sizeof(shm::GpuUsage) +
                                      offsetof(shm::GpuUsage, busy_processes));
  return w.fd >= 0 && pread(w.fd, &busy, sizeof(busy), at) == sizeof(busy) && busy == 0;
}

}  // namespace

void set_duty_neighbours(unsigned gpu, const std::string& alloc_folder,
                         const std::vector<DutyNeighbour>& neighbours) noexcept {
  if (gpu >= shm::kMaxGpus) return;
  try {
    const std::filesystem::path alloc_dir = std::filesystem::path(alloc_folder).parent_path();
    std::vector<Watched> next;
    std::scoped_lock hold(lock());
    std::vector<Watched>& now = g_neighbours[gpu].watched;
    for (const DutyNeighbour& n : neighbours) {
      Watched w{n, -1};
      for (Watched& old : now) {
        if (old.who == n) std::swap(w.fd, old.fd);  // keep the open file
      }
      if (w.fd < 0) w.fd = open_usage(alloc_dir, n);
      next.push_back(std::move(w));
    }
    for (const Watched& old : now) {
      if (old.fd >= 0) ::close(old.fd);
    }
    now = std::move(next);
  } catch (...) {  // out of memory: watch nobody (no lending)
  }
}

gate::Neighbours duty_neighbours(unsigned gpu) noexcept {
  if (gpu >= shm::kMaxGpus) return gate::Neighbours::kNone;
  std::scoped_lock hold(lock());
  const std::vector<Watched>& watched = g_neighbours[gpu].watched;
  if (watched.empty()) return gate::Neighbours::kNone;
  for (const Watched& w : watched) {
    if (!idle(w)) return gate::Neighbours::kBusy;
  }
  return gate::Neighbours::kIdle;
}

void reset_duty_neighbours_after_fork() noexcept {
  new (g_lock_storage) std::mutex;
}

}  // namespace cushare::shim
