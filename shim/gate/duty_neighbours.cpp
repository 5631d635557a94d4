#include "shim/gate/duty_neighbours.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstddef>
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
using GpuNeighbours = std::vector<Watched>;

// Constructed in place so that a fork child can start over with a free lock.
alignas(std::mutex) std::byte g_lock_storage[sizeof(std::mutex)];
std::mutex& lock() noexcept {
  static std::mutex* m = new (g_lock_storage) std::mutex;
  return *m;
}
// Never destroyed: threads may still wait at the gate while exit handlers run.
std::array<GpuNeighbours, shm::kMaxGpus>& neighbours() noexcept {
  static auto* n = new std::array<GpuNeighbours, shm::kMaxGpus>;
  return *n;
}

// A claim's id names a folder under RUN/alloc: one plain component.
bool plain_name(const std::string& id) {
  return !id.empty() && id != "." && id != ".." && id.find('/') == std::string::npos;
}

// RUN/alloc/<id>/usage, following no link on the way: the folder and the
// file are both opened with O_NOFOLLOW.
int open_usage(const std::filesystem::path& alloc_dir, const DutyNeighbour& n) {
  if (!plain_name(n.alloc_id) || n.gpu_index >= shm::kMaxGpus) return -1;
  const auto folder = alloc_dir / n.alloc_id;
  const int dir = ::open(folder.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) return -1;
  const int fd = ::openat(dir, shm::kUsageName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  ::close(dir);
  if (fd < 0) return -1;
  struct stat sb {};
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void close_all(const GpuNeighbours& watched) noexcept {
  for (const Watched& w : watched) {
    if (w.fd >= 0) ::close(w.fd);
  }
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
                         const std::vector<DutyNeighbour>& list) noexcept {
  if (gpu >= shm::kMaxGpus) return;
  GpuNeighbours next;
  try {
    // Opened afresh at every refresh: an allocation folder made again under
    // the same id is read from its new file.
    const std::filesystem::path alloc_dir = std::filesystem::path(alloc_folder).parent_path();
    next.reserve(list.size());
    for (const DutyNeighbour& n : list) {
      bool seen = false;  // one watch per allocation, however many claims name it
      for (const Watched& w : next) seen = seen || w.who.alloc_id == n.alloc_id;
      if (!seen) next.push_back({n, open_usage(alloc_dir, n)});
    }
  } catch (...) {  // out of memory: watch nobody (no borrowing)
    close_all(next);
    next.clear();
  }
  std::scoped_lock hold(lock());
  close_all(neighbours()[gpu]);
  neighbours()[gpu].swap(next);
}

gate::Neighbours duty_neighbours(unsigned gpu) noexcept {
  if (gpu >= shm::kMaxGpus) return gate::Neighbours::kNone;
  std::scoped_lock hold(lock());
  const GpuNeighbours& watched = neighbours()[gpu];
  if (watched.empty()) return gate::Neighbours::kNone;
  for (const Watched& w : watched) {
    if (!idle(w)) return gate::Neighbours::kBusy;
  }
  return gate::Neighbours::kIdle;
}

void duty_neighbours_before_fork() noexcept {
  lock().lock();
}
void duty_neighbours_after_fork_parent() noexcept {
  lock().unlock();
}
void duty_neighbours_after_fork_child() noexcept {
  // The lock was taken before the fork by a thread the child does not have.
  new (g_lock_storage) std::mutex;
}

}  // namespace cushare::shim
