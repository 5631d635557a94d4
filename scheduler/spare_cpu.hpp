// How much CPU the host leaves idle, from the kernel's counters
// (/proc/stat). The daemon tells the next holder to wait for its grant on
// the CPU (LeaseDecision::ready) only where a CPU is to spare: a thread that
// spins for its grant on a host whose every CPU is busy takes that CPU from
// the work beside it (CPU-bound neighbours, the other tenants' threads), and
// four equal tenants with host gaps beside a hog per core lost 4 points of
// the device that way. Pure: the daemon reads the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace cushare::sched {

struct CpuTimes {
  std::uint64_t idle = 0;   // idle and iowait ticks, all CPUs
  std::uint64_t total = 0;  // all ticks (guest time is inside user time)
  unsigned cpus = 0;        // the "cpuN" lines
};

// The aggregate "cpu" line and the number of "cpuN" lines of /proc/stat;
// nullopt for text without them.
std::optional<CpuTimes> parse_proc_stat(std::string_view text);

class SpareCpu {
 public:
  // The CPUs the host must have left idle since the previous reading for
  // its spare CPU to count (SpareCpu::enough).
  static constexpr double kEnoughCpus = 0.5;
  // Readings closer than this many ticks per CPU (100 ms at the usual
  // USER_HZ of 100) say little: the later one is skipped.
  static constexpr std::uint64_t kMinTicksPerCpu = 10;

  void observe(const CpuTimes& now);
  // The idle CPUs between the last two readings (0 before two).
  double cpus() const { return spare_; }
  bool enough() const { return spare_ >= kEnoughCpus; }

 private:
  std::optional<CpuTimes> last_;
  double spare_ = 0;
};

}  // namespace cushare::sched
