// The idle time of a gap between two spells that the CPU's clock did not
// see (pure, unit-tested). The local duty cycle counts an allocation busy
// from the launch that begins a spell until the tracker sees the spell's
// last event complete; the GPU was idle for the allocation before the
// first of those (the launch's way to the GPU, a wait while another
// context's work held it: a neighbour's borrowed launch, the end of its
// slot) and after the second (the completion's way to the tracker).
// Charged as busy, that stopped caps of 30 and 50 with host gaps at 28 and
// 47.5, and a cap of 50 that synchronises after every kernel at 48.5 alone.
//
// The GPU's clock measures the whole gap: from the spell's last event to an
// event recorded before the next spell's first launch, which completes when
// the allocation's context reaches the GPU. The CPU counted a part of it:
// from when it saw the spell end to when the next spell began (no later
// than the GPU reached it). What the GPU measured beyond that part was idle
// time too, so the gap counts whole, never less than the CPU's part (which
// may begin a little early: the tracker dates a completion through a chain
// of GPU timestamps that does not allow for drift). Durations only, so no
// mapping between the two clocks: the GPU's span gives up kClockDriftPpm of
// itself for the drift between them (NTP slews CLOCK_MONOTONIC by at most
// 500 ppm; the GPU's crystal adds its own) and kTimestampSlackNs for its
// timestamps' resolution, a span past kGapSpanNs says nothing, and the
// CPU's clock bounds it from above as well.
#pragma once

#include <algorithm>
#include <cstdint>

namespace cushare::shim::gate {

inline constexpr std::uint64_t kGapSpanNs = 100'000'000;
inline constexpr std::uint64_t kClockDriftPpm = 1'000;
// The resolution of the GPU's event timestamps (about half a microsecond on
// hardware), twice over at each end.
inline constexpr std::uint64_t kTimestampSlackNs = 2'000;

// The GPU's clock measured `gpu_gap_ns` between a spell's end and the next
// spell's start; the CPU's clock counted `seen_idle_ns` of that gap as
// idle; `cpu_bound_ns` is the longest the gap can have been on the CPU's
// clock (from when the spell's last event was recorded to when the next
// spell's probe was seen complete), which a misdated timestamp cannot
// stretch. Returns the idle time left to count, never more than there was.
inline std::uint64_t unseen_idle_ns(std::uint64_t gpu_gap_ns, std::uint64_t seen_idle_ns,
                                    std::uint64_t cpu_bound_ns) noexcept {
  if (gpu_gap_ns > kGapSpanNs) return 0;
  const std::uint64_t slack = gpu_gap_ns * kClockDriftPpm / 1'000'000 + kTimestampSlackNs;
  if (gpu_gap_ns <= slack) return 0;
  const std::uint64_t gap = std::min(gpu_gap_ns - slack, cpu_bound_ns);
  return gap > seen_idle_ns ? gap - seen_idle_ns : 0;
}

}  // namespace cushare::shim::gate
