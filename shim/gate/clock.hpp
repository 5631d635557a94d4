// The launch gate's clock: CLOCK_MONOTONIC nanoseconds, read from the CPU's
// counter through a per-thread anchor (shim/gate/tsc_clock.hpp) where the
// kernel vouches for the counter (shim/gate/clock_source.hpp), else from
// clock_gettime(). CUSHARE_GATE_CLOCK=monotonic forces clock_gettime().
#pragma once

#include <cstdint>

#include "shim/gate/tsc_clock.hpp"

namespace cushare::shim::gate {

namespace detail {
// constinit: no dynamic initialisation, so no TLS wrapper call on the fast path.
extern __attribute__((tls_model("initial-exec"))) constinit thread_local tsc::ThreadAnchors t_clock;
// Takes a fresh paired reading (or reads the clock when the counter is not
// used) and returns the time.
std::uint64_t reanchor_now_ns() noexcept;
}  // namespace detail

// No syscall and no lock: one counter read and a multiply while the
// thread's anchor covers it (all but about one call per millisecond).
inline std::uint64_t gate_now_ns() noexcept {
  if constexpr (tsc::kHasCounter) {
    const tsc::Anchor& a = detail::t_clock.current;
    std::uint64_t ns;
    if (a.max_ticks != 0 && tsc::convert(a, tsc::read_counter(), ns)) [[likely]]
      return ns;
  }
  return detail::reanchor_now_ns();
}

// Decides the clock's source and takes the first paired reading, so that the
// first launch does not read the clocksource files; at the shim's
// initialisation. Returns what the gate reads, for the log.
const char* prepare_gate_clock() noexcept;

}  // namespace cushare::shim::gate
