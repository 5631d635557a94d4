// The launch gate's counter clock on aarch64 (the generic timer's virtual
// count), checked under emulation: read through the gate's calibration and
// paired readings, the counter must track CLOCK_MONOTONIC, and the
// clocksource facts must be read without trouble (under qemu-user they are
// the host's, so the gate's own source decision is not exercised here).
// Built and run by aarch64_clock.sh.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <vector>

#include "shim/gate/clock.hpp"
#include "shim/gate/clock_source.hpp"
#include "shim/gate/tsc_clock.hpp"
#include "shm/clock.hpp"

using cushare::shm::monotonic_ns;
namespace tsc = cushare::shim::tsc;
namespace gate = cushare::shim::gate;

int main() {
  static_assert(tsc::kHasCounter && gate::kCounterArch == gate::CounterArch::kAarch64);
  std::uint64_t freq = 0;
  asm volatile("mrs %0, cntfrq_el0" : "=r"(freq));
  std::printf("counter frequency %llu Hz\n", static_cast<unsigned long long>(freq));

  // 300 ms of readings 20 us apart, each converted as the gate does (the
  // thread's anchor, re-anchored by paired readings past its span) and
  // compared with the clock read just after it.
  tsc::Calibration cal;
  tsc::ThreadAnchors thread;
  std::vector<double> errors;
  int anchors = 0;
  const std::uint64_t start = monotonic_ns();
  while (monotonic_ns() - start < 300'000'000) {
    const std::uint64_t ticks = tsc::read_counter();
    const std::uint64_t now = monotonic_ns();
    std::uint64_t ns = 0;
    if (thread.current.max_ticks && tsc::convert(thread.current, ticks, ns)) {
      errors.push_back(static_cast<double>(now) - static_cast<double>(ns));
    } else {
      tsc::paired_reading(
          cal, thread, [] { return monotonic_ns(); }, [] { return tsc::read_counter(); });
      ++anchors;
    }
    const timespec pause{0, 20'000};
    nanosleep(&pause, nullptr);
  }
  std::sort(errors.begin(), errors.end());
  const auto at = [&](double q) {
    return errors[static_cast<std::size_t>(q * (errors.size() - 1))];
  };
  const gate::ClockFacts facts = gate::read_clock_facts();
  std::printf(
      "%d anchors, %zu conversions; clock minus counter reading: median %.0f ns, "
      "p1 %.0f, p99 %.0f; calibration %s, %.3f ns per tick\n",
      anchors, errors.size(), errors.empty() ? 0 : at(0.5), errors.empty() ? 0 : at(0.01),
      errors.empty() ? 0 : at(0.99), cal.broken() ? "dropped" : "kept",
      static_cast<double>(cal.mult()) / 4294967296.0);
  std::printf("this host's clocksource: %s; trusted here: %s; gate clock minus clock: %lld ns\n",
              facts.current.empty() ? "(unreadable)"
                                    : facts.current.substr(0, facts.current.find('\n')).c_str(),
              gate::counter_trusted(gate::kCounterArch, facts) ? "yes" : "no",
              static_cast<long long>(gate::gate_now_ns() - monotonic_ns()));
  // Emulation reads both clocks slowly: a few microseconds of slack.
  const bool ok = !cal.broken() && errors.size() > 1000 && at(0.5) > -2'000 && at(0.5) < 5'000;
  std::puts(ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
