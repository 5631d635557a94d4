// How long the first launch of a spell waited for the GPU while another
// context ran on it, as a lower bound on the CPU's clock (pure,
// unit-tested). The local duty cycle counts an allocation busy from the
// launch that ends its idle gap; when the GPU was time-slicing another
// allocation's work then (a neighbour's borrowed launch, the end of its
// slot), the wait is not the allocation's GPU time, and counted as such it
// stopped caps of 30 and 50 with host gaps at 28 and 47.5.
//
// The GPU's clock dates the wait: an event recorded before the spell's
// first launch completes when its context reaches the GPU. Mapped onto the
// CPU's clock from below only, it can be too short, never too long, so the
// budget never counts less than the allocation ran: an event completed no
// earlier than it was recorded, nor earlier than an earlier event's lower
// bound plus the GPU time between the two. A chain starts afresh at every
// spell whose event completed as it was recorded (the usual case: nothing
// else on the GPU), and breaks past kWaitChainSpanNs; each link gives up
// kClockDriftPpm of its span for the drift between the two clocks (NTP
// slews CLOCK_MONOTONIC by at most 500 ppm; the GPU's crystal adds its own)
// and kTimestampSlackNs for the timestamps' resolution.
#pragma once

#include <algorithm>
#include <cstdint>

namespace cushare::shim::gate {

inline constexpr std::uint64_t kWaitChainSpanNs = 100'000'000;
inline constexpr std::uint64_t kClockDriftPpm = 1'000;
// Each link also gives up the resolution of the GPU's event timestamps
// (about half a microsecond on hardware), twice over.
inline constexpr std::uint64_t kTimestampSlackNs = 2'000;

// When an event completed at the earliest, on the CPU's clock: recorded at
// `recorded_ns`, `gpu_after_ns` after an earlier event on the GPU's clock
// that completed no earlier than `earlier_ns` (0: unknown).
inline std::uint64_t completed_no_earlier_than(std::uint64_t recorded_ns, std::uint64_t earlier_ns,
                                               std::uint64_t gpu_after_ns) noexcept {
  if (earlier_ns == 0 || gpu_after_ns > kWaitChainSpanNs) return recorded_ns;
  const std::uint64_t slack = gpu_after_ns * kClockDriftPpm / 1'000'000 + kTimestampSlackNs;
  const std::uint64_t carried = earlier_ns + gpu_after_ns;
  return std::max(recorded_ns, carried > slack ? carried - slack : 0);
}

// The wait of a spell that began at `begun_ns` (its event recorded then)
// and whose event completed no earlier than `started_no_earlier_ns`.
inline std::uint64_t spell_wait_ns(std::uint64_t begun_ns,
                                   std::uint64_t started_no_earlier_ns) noexcept {
  return started_no_earlier_ns > begun_ns ? started_no_earlier_ns - begun_ns : 0;
}

// The part of an idle gap that the CPU's clock missed. The gap was counted
// from `counted_from_ns`: when the spell's last completion was seen, which
// a thread woken late (a blocking sync on a VM: tens of microseconds) puts
// after the completion itself. A probe recorded at the next spell's start
// and seen complete at `probe_seen_ns`, `gpu_gap_ns` after that completion
// on the GPU's clock, places the completion no later than `probe_seen_ns`
// less the gap (plus the clocks' slack): the time from there to
// `counted_from_ns`, not before `floor_ns`, was idle too. An upper bound on
// the completion from an observation, so never more than the GPU idled;
// nothing where the probe was not seen at once (it waited for the GPU).
inline std::uint64_t unseen_idle_ns(std::uint64_t counted_from_ns, std::uint64_t probe_seen_ns,
                                    std::uint64_t gpu_gap_ns, std::uint64_t floor_ns) noexcept {
  if (counted_from_ns == 0 || probe_seen_ns == 0 || gpu_gap_ns > kWaitChainSpanNs) return 0;
  const std::uint64_t slack = gpu_gap_ns * kClockDriftPpm / 1'000'000 + kTimestampSlackNs;
  if (probe_seen_ns + slack <= gpu_gap_ns) return 0;
  const std::uint64_t ended_by = std::max(probe_seen_ns + slack - gpu_gap_ns, floor_ns);
  return counted_from_ns > ended_by ? counted_from_ns - ended_by : 0;
}

}  // namespace cushare::shim::gate
