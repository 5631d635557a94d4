// Where a capped allocation's window lies in the local duty cycle (no daemon):
// pure, unit-tested. Without coordination every allocation of a GPU opened
// its window at the start of each period, so their windows overlapped and
// the GPU was time-sliced between them inside the overlap (caps of 30 and 50
// ran at 10.4 and 39.7). Allocations that share a node run dir instead lay
// their windows end to end, in the order of their ids, each as long as its
// limit (docs/scheduler.md, "No daemon").
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>

namespace cushare::shim {

struct DutyClaim {
  std::string_view alloc_id;
  std::string_view gpu_uuid;
  std::uint32_t limit_pct = 0;  // 1-100
};

// Percent of the period at which `self`'s window opens: the sum of the
// limits of the claims on the same GPU whose ids sort before it. Past 100
// the windows wrap around and overlap (the caps cannot all be met then).
inline std::uint32_t duty_offset_pct(std::span<const DutyClaim> live, const DutyClaim& self) {
  std::uint32_t offset = 0;
  for (const DutyClaim& c : live) {
    if (c.gpu_uuid == self.gpu_uuid && c.alloc_id < self.alloc_id)
      offset += std::clamp<std::uint32_t>(c.limit_pct, 1, 100);
  }
  return offset % 100;
}

// Where `now` lies in the period: the window's length and how far into it
// (or past it) the period's phase is.
struct DutyPhase {
  std::uint64_t on = 0;     // the window's length
  std::uint64_t phase = 0;  // time since the window opened, modulo the period
};
inline DutyPhase duty_phase(std::uint64_t now, std::uint64_t period, std::uint32_t offset_pct,
                            std::uint32_t limit_pct) {
  const std::uint64_t shift = period * (offset_pct % 100) / 100;
  return {.on = period * std::clamp<std::uint32_t>(limit_pct, 1, 100) / 100,
          .phase = (now + period - shift) % period};
}

// How long to wait from `now` until the window [offset, offset + limit) of
// the period opens, 0 inside it. `lead_ns`: a launch within this of the
// window's end waits for the next one (its work would run past it).
inline std::uint64_t duty_wait_ns(std::uint64_t now, std::uint64_t period, std::uint32_t offset_pct,
                                  std::uint32_t limit_pct, std::uint64_t lead_ns) {
  const DutyPhase d = duty_phase(now, period, offset_pct, limit_pct);
  return d.phase + lead_ns < d.on ? 0 : period - d.phase;
}

// How long from `now` launches may still go in the window it lies in (the
// complement of duty_wait_ns(): 0 wherever that is not).
inline std::uint64_t duty_open_ns(std::uint64_t now, std::uint64_t period, std::uint32_t offset_pct,
                                  std::uint32_t limit_pct, std::uint64_t lead_ns) {
  const DutyPhase d = duty_phase(now, period, offset_pct, limit_pct);
  return d.phase + lead_ns < d.on ? d.on - lead_ns - d.phase : 0;
}

}  // namespace cushare::shim
