#include "shim/gate/clock.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "shm/clock.hpp"

namespace cushare::shim::gate {

namespace detail {
__attribute__((tls_model("initial-exec"))) constinit thread_local tsc::Anchor t_clock_anchor;
}  // namespace detail

namespace {

tsc::Calibration g_calibration;

enum : int { kUnknown, kCounter, kClockOnly };
std::atomic<int> g_source{kUnknown};

// The counter is trusted only where the kernel trusts it: it keeps
// CLOCK_MONOTONIC with the TSC only while the TSC is invariant and
// synchronised across CPUs (it falls back to another clocksource if not).
bool kernel_keeps_time_with_tsc() noexcept {
  const int fd = ::open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                        O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[16] = {};
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n >= 3 && std::strncmp(buf, "tsc", 3) == 0 && (n == 3 || buf[3] == '\n');
}

int source() noexcept {
  int s = g_source.load(std::memory_order_acquire);
  if (s != kUnknown) return s;
  bool counter = false;
#if defined(__x86_64__)
  const char* forced = std::getenv("CUSHARE_GATE_CLOCK");
  counter = !(forced && std::strcmp(forced, "monotonic") == 0) && kernel_keeps_time_with_tsc();
#endif
  s = counter ? kCounter : kClockOnly;
  g_source.store(s, std::memory_order_release);  // racing threads store the same
  return s;
}

}  // namespace

std::uint64_t detail::reanchor_now_ns() noexcept {
#if defined(__x86_64__)
  if (source() == kCounter && !g_calibration.broken()) {
    // A paired reading: the counter between two clock reads close together
    // (retried when the thread was preempted in between).
    for (int attempt = 0; attempt < 3; ++attempt) {
      const std::uint64_t before = shm::monotonic_ns();
      const std::uint64_t ticks = __rdtsc();
      const std::uint64_t after = shm::monotonic_ns();
      if (after - before > tsc::kMaxPairSkewNs) continue;
      const std::uint64_t ns = before + (after - before) / 2;
      t_clock_anchor = g_calibration.anchor(ticks, ns);
      return ns;
    }
  }
#endif
  t_clock_anchor = {};
  return shm::monotonic_ns();
}

bool gate_clock_uses_tsc() noexcept {
  return source() == kCounter && !g_calibration.broken() && g_calibration.mult() != 0;
}

}  // namespace cushare::shim::gate
