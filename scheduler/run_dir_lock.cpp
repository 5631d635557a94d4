#include "scheduler/run_dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "shm/run_dir_layout.hpp"

namespace cushare::sched {
namespace fs = std::filesystem;

RunDirLock::RunDirLock(const fs::path& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec)
    throw std::runtime_error("cannot create run dir " + run_dir.string() + ": " + ec.message());
  const fs::path path = run_dir / shm::kDaemonLockName;
  // O_NOFOLLOW: whoever could plant a symlink here must not make the daemon
  // create or truncate a file elsewhere.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    throw std::runtime_error("cannot open " + path.string() + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof(holder) - 1, 0);
    std::string pid = n > 0 ? std::string(holder, static_cast<std::size_t>(n)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw std::runtime_error("another cushared" + (pid.empty() ? "" : " (pid " + pid + ")") +
                               " already runs on run dir " + run_dir.string() + " (it holds " +
                               path.string() + ")");
    throw std::runtime_error("cannot lock " + path.string() + ": " + std::strerror(err));
  }
  // The PID is only for the message above; the lock is what counts, so a
  // failed write is no reason to stop.
  const std::string pid = std::to_string(::getpid()) + "\n";
  [[maybe_unused]] const int truncated = ::ftruncate(fd_, 0);
  [[maybe_unused]] const ssize_t written = ::pwrite(fd_, pid.data(), pid.size(), 0);
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace cushare::sched
