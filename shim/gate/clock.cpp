#include "shim/gate/clock.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "shim/gate/clock_source.hpp"
#include "shm/clock.hpp"

namespace cushare::shim::gate {

namespace detail {
__attribute__((tls_model("initial-exec"))) constinit thread_local tsc::ThreadAnchors t_clock;
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
    return tsc::paired_reading(
        g_calibration, t_clock, [] { return shm::monotonic_ns(); },
        [] { return tsc::read_counter(); });
  }
  t_clock.current = {};
  return shm::monotonic_ns();
}

const char* prepare_gate_clock() noexcept {
  gate_now_ns();  // the calibration's base, and the source decided before any launch
  if (source() != kCounter) return "clock_gettime";
  return tsc::kCounterName;
}

}  // namespace cushare::shim::gate
