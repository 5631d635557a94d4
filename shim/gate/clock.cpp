#include "shim/gate/clock.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "shim/gate/clock_source.hpp"
#include "shm/clock.hpp"

namespace cushare::shim::gate {

namespace detail {
__attribute__((tls_model("initial-exec"))) constinit thread_local tsc::Anchor t_clock_anchor;
}  // namespace detail

namespace {

tsc::Calibration g_calibration;

enum : int { kUnknown, kCounter, kClockOnly };
std::atomic<int> g_source{kUnknown};

int source() noexcept {
  int s = g_source.load(std::memory_order_acquire);
  if (s != kUnknown) return s;
  bool counter = false;
  if constexpr (tsc::kHasCounter) {
    const char* forced = std::getenv("CUSHARE_GATE_CLOCK");
    try {
      counter = !(forced && std::strcmp(forced, "monotonic") == 0) &&
                gate::counter_trusted(gate::kCounterArch, gate::read_clock_facts());
    } catch (...) {  // out of memory reading the facts: the clock will do
      counter = false;
    }
  }
  s = counter ? kCounter : kClockOnly;
  g_source.store(s, std::memory_order_release);  // racing threads store the same
  return s;
}

}  // namespace

std::uint64_t detail::reanchor_now_ns() noexcept {
  if (tsc::kHasCounter && source() == kCounter && !g_calibration.broken()) {
    // A paired reading: the counter between two clock reads close together
    // (retried when the thread was preempted in between).
    for (int attempt = 0; attempt < 3; ++attempt) {
      const std::uint64_t before = shm::monotonic_ns();
      const std::uint64_t ticks = tsc::read_counter();
      const std::uint64_t after = shm::monotonic_ns();
      if (after - before > tsc::kMaxPairSkewNs) continue;
      const std::uint64_t ns = before + (after - before) / 2;
      const tsc::Anchor previous = t_clock_anchor;
      t_clock_anchor = g_calibration.anchor(ticks, ns, previous);
      return ns;
    }
  }
  t_clock_anchor = {};
  return shm::monotonic_ns();
}

}  // namespace cushare::shim::gate
