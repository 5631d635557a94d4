// Where a capped allocation may run in the local duty cycle (no daemon):
// pure, unit-tested. Without coordination every allocation of a GPU opened
// its window at the start of each period, so their windows overlapped and
// the GPU was time-sliced between them inside the overlap (caps of 30 and 50
// ran at 10.4 and 39.7). Allocations that share a node run dir instead lay
// their slots end to end, in the order of their ids. In its slot an
// allocation runs until it has been busy for its limit of the period: a
// tenant whose own syncs or host work leave the GPU idle inside its slot
// makes that time up, as far as the slot reaches (docs/scheduler.md, "No
// daemon").
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

inline constexpr std::uint32_t kPeriodPpm = 1'000'000;

// An allocation's slot of the period, in parts per million of it.
struct DutySlot {
  std::uint32_t offset_ppm = 0;
  std::uint32_t length_ppm = kPeriodPpm;
  bool operator==(const DutySlot&) const = default;
};

// `self`'s slot among the claims on its GPU. The slots lie end to end in id
// order. While the limits leave part of the period unclaimed, every slot
// is stretched by it in proportion to its limit (caps of 30 and 50: slots of
// 37.5 % and 62.5 %), so that a tenant that leaves the GPU idle now and then
// still reaches its cap of busy time. Limits past 100 in all: slots as long
// as the limits, wrapping around and overlapping (the caps cannot all be
// met then). `live` may lack `self` (its claim could not be written).
inline DutySlot duty_slot(std::span<const DutyClaim> live, const DutyClaim& self) {
  auto pct = [](const DutyClaim& c) { return std::clamp<std::uint32_t>(c.limit_pct, 1, 100); };
  std::uint64_t before = 0;
  std::uint64_t total = pct(self);
  for (const DutyClaim& c : live) {
    if (c.gpu_uuid != self.gpu_uuid || c.alloc_id == self.alloc_id) continue;
    total += pct(c);
    if (c.alloc_id < self.alloc_id) before += pct(c);
  }
  // ppm of the period per percent of limit: 10'000, or more where the
  // limits leave room.
  const std::uint64_t scale = total < 100 ? kPeriodPpm / total : kPeriodPpm / 100;
  return {.offset_ppm = static_cast<std::uint32_t>(before * scale % kPeriodPpm),
          .length_ppm =
              static_cast<std::uint32_t>(std::min<std::uint64_t>(pct(self) * scale, kPeriodPpm))};
}

// Where `now` lies in the period, for a slot.
struct DutyPosition {
  std::uint64_t open_ns = 0;  // when the slot last opened (at or before now)
  std::uint64_t phase = 0;    // now - open_ns
  std::uint64_t length = 0;   // the slot's length
};
// `ppm` of `period`, exact for any period (a quantum from the limits region
// may be anything: the product is taken in 128 bits).
inline std::uint64_t ppm_of(std::uint64_t period, std::uint32_t ppm) {
  return static_cast<std::uint64_t>(static_cast<unsigned __int128>(period) * ppm / kPeriodPpm);
}
inline DutyPosition duty_position(std::uint64_t now, std::uint64_t period, DutySlot slot) {
  const std::uint64_t shift = ppm_of(period, slot.offset_ppm % kPeriodPpm);
  const std::uint64_t phase = (now + period - shift) % period;
  return {.open_ns = now >= phase ? now - phase : 0,
          .phase = phase,
          .length = ppm_of(period, std::min(slot.length_ppm, kPeriodPpm))};
}

// An allocation's standing in the current period: its slot, its budget of
// busy time (its limit of the period) and how much of it it used.
struct DutyStanding {
  std::uint64_t period = 0;
  DutySlot slot;
  std::uint64_t budget_ns = 0;
  std::uint64_t busy_ns = 0;  // busy since the slot last opened
};

// How long from `now` launches may still go, 0 where none may: inside the
// slot and the budget, less a lead before each end (a launch within it
// waits for the next slot: its work would run past the end). `budget_ns`
// less `busy_ns` is what is left of the budget.
inline std::uint64_t duty_open_ns(std::uint64_t now, const DutyStanding& d,
                                  std::uint64_t slot_lead_ns, std::uint64_t budget_lead_ns) {
  const DutyPosition p = duty_position(now, d.period, d.slot);
  if (p.phase + slot_lead_ns >= p.length || d.busy_ns + budget_lead_ns >= d.budget_ns) return 0;
  return std::min(p.length - slot_lead_ns - p.phase, d.budget_ns - budget_lead_ns - d.busy_ns);
}

// How long to wait from `now` until launches may go again: 0 while
// duty_open_ns() is not, else until the slot opens next.
inline std::uint64_t duty_wait_ns(std::uint64_t now, const DutyStanding& d,
                                  std::uint64_t slot_lead_ns, std::uint64_t budget_lead_ns) {
  if (duty_open_ns(now, d, slot_lead_ns, budget_lead_ns) != 0) return 0;
  return d.period - duty_position(now, d.period, d.slot).phase;
}

}  // namespace cushare::shim
