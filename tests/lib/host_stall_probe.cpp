// host_stall_probe: how long this host could not run its highest-priority
// thread, while the timing tests measure a window (tests/lib/cushare_timing.py).
//
// A hypervisor that takes a vCPU away stops every thread of the guest on it,
// the daemon's real-time ones too, and shares measured meanwhile say more
// about the host than the scheduler. /proc/stat's `steal` counts that time on
// most hypervisors, not on all (Firecracker's guests read 0 however long their
// vCPUs wait). This probe sees it whatever the hypervisor reports: a thread at
// SCHED_FIFO priority 90 (above the daemon, above every tenant) sleeps to
// absolute deadlines every millisecond and adds up how late it wakes. Within
// the guest only interrupts, kernel sections that cannot be preempted and the
// few kernel threads above it can hold it off its CPU, briefly: lateness
// beyond kCountedNs is mostly the host's. A stall shorter than a period that
// falls between two wake-ups is not seen.
//
// The thread sees the stalls of the vCPU it runs on, where steal is counted
// over all of them.
//
// Runs until SIGTERM or SIGINT (or its parent's death, or an hour: a harness
// killed outright must not leave it waking every millisecond at real-time
// priority), then prints one line of JSON:
//   {"realtime": true, "elapsed_ns": N, "stalled_ns": N, "longest_ns": N}
// Without the right to real-time priority it prints {"realtime": false} and
// exits at once: a late wake-up would then measure the guest's own load.
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>

namespace {

constexpr std::uint64_t kPeriodNs = 1'000'000;
// A wake-up later than this is a stall (a quiet VM wakes a real-time thread
// within tens of microseconds).
constexpr std::uint64_t kCountedNs = 200'000;
constexpr int kPriority = 90;
constexpr std::uint64_t kLongestRunNs = 3'600'000'000'000;

volatile sig_atomic_t g_stop = 0;

void on_signal(int) {
  g_stop = 1;
}

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

int main() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) return 0;  // the parent died before the line above

  sched_param param{};
  param.sched_priority = kPriority;
  if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) != 0) {
    std::printf("{\"realtime\": false}\n");
    return 0;
  }

  const std::uint64_t start = now_ns();
  std::uint64_t next = start + kPeriodNs;
  std::uint64_t stalled = 0;
  std::uint64_t longest = 0;
  while (!g_stop && next - start < kLongestRunNs) {
    const timespec deadline{.tv_sec = static_cast<time_t>(next / 1'000'000'000u),
                            .tv_nsec = static_cast<long>(next % 1'000'000'000u)};
    const int slept = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr);
    if (slept == EINTR) continue;
    if (slept != 0) {  // would spin at real-time priority
      std::printf("{\"realtime\": false}\n");
      return 1;
    }
    const std::uint64_t woke = now_ns();
    const std::uint64_t late = woke > next ? woke - next : 0;
    if (late > kCountedNs) stalled += late;
    longest = std::max(longest, late);
    // After a stall the next deadline is a period from now: the time lost
    // is counted once.
    next = std::max(next + kPeriodNs, woke + kPeriodNs / 2);
  }
  std::printf(
      "{\"realtime\": true, \"elapsed_ns\": %llu, \"stalled_ns\": %llu, \"longest_ns\": %llu}\n",
      static_cast<unsigned long long>(now_ns() - start), static_cast<unsigned long long>(stalled),
      static_cast<unsigned long long>(longest));
  return 0;
}
