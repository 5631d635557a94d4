// One cushared per node run dir. Two daemons on one run dir would both write
// heartbeats and grant leases in the same limits regions, each believing it
// alone arbitrates, so tenants could hold leases at the same time. The first
// daemon holds an exclusive flock on RUN/cushared.lock for its lifetime; the
// kernel drops it when the process ends however it ends, so a crashed daemon
// never leaves a stale lock behind (unlike a PID file).
#pragma once

#include <filesystem>

namespace cushare::sched {

class RunDirLock {
 public:
  // Creates the run dir if missing, then takes the lock without waiting.
  // Throws std::runtime_error naming the run dir (and the holder's PID when
  // known) when another daemon holds it, or when the file cannot be made.
  explicit RunDirLock(const std::filesystem::path& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace cushare::sched
