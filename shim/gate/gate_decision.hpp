// What the launch gate's slow path does next (docs/scheduler.md, "Launch
// gate"), pure: the slow path reads a GateSnapshot of the shared words and of
// its tracker, asks decide_gate(), and carries the answer out. No clock reads
// and no I/O here, so every branch is unit-tested with made-up times, as the
// daemon's LeaseScheduler is.
#pragma once

#include <algorithm>
#include <cstdint>

#include "shim/gate/duty_cycle_plan.hpp"
#include "shim/gate/estimate.hpp"
#include "shm/daemon_timing.hpp"
#include "shm/layout.hpp"

namespace cushare::shim::gate {

// How long a waiter sleeps (on the lease futex, or towards its duty-cycle
// window) before it looks at the heartbeat again.
inline constexpr std::uint64_t kLeaseWaitSliceNs = 20'000'000;
// The daemon's quantum when the limits region names none.
inline constexpr std::uint64_t kDefaultQuantumNs = 10'000'000;
// Without a daemon the queue is still paced, as if under a lease this many
// horizons long from now: a burst of launches cannot queue seconds of work.
inline constexpr std::uint64_t kLocalLeaseHorizons = 4;

// The queue a lease holder may keep ahead of the GPU: a quarter of what is
// left of its lease, from kQueueHorizonNs up to kMaxQueueHorizonNs. Within a
// lease of one quantum that is the 2 ms horizon; a lone holder's lease, kept
// several quanta ahead, lets it queue up to 8 ms and so ride out a CPU stall
// (a hypervisor taking the host's CPU, a burst of other work) that would
// otherwise leave the GPU idle under its lease. The deeper queue is bounded
// by the lease like any other: it shrinks as the lease's end comes near, and
// a lease cut back when another tenant arrives keeps that tenant waiting for
// at most kMaxQueueHorizonNs of the holder's work (charged to the holder).
inline constexpr std::uint64_t kMaxQueueHorizonNs = 8'000'000;
inline constexpr std::uint64_t kLeaseLeftPerHorizon = 4;

[[gnu::always_inline]] inline std::uint64_t queue_horizon_ns(std::uint64_t now,
                                                             std::uint64_t expiry) noexcept {
  const std::uint64_t left = expiry > now ? expiry - now : 0;
  return std::clamp(left / kLeaseLeftPerHorizon, kQueueHorizonNs, kMaxQueueHorizonNs);
}

// Whether a launch may go now, holding a lease that expires at `expiry`,
// with `queued_ns` of work (the tracker's estimate) ahead of it.
[[gnu::always_inline]] inline bool queue_allows(std::uint64_t now, std::uint64_t expiry,
                                                std::uint64_t queued_ns,
                                                std::uint64_t horizon_ns) noexcept {
  if (queued_ns == 0) return true;  // nothing in flight: one launch always may go
  // Work launched now starts after what is queued: keep it inside the lease.
  return queued_ns <= horizon_ns && now + queued_ns < expiry;
}

// Under a cut lease (shm::kLeaseCutBit), whether a launch that would start
// after `queued_ns` and take about `per_launch_ns` (this process's figure,
// 0: not measured) ends close enough to the expiry.
inline bool cut_lease_allows(std::uint64_t now, std::uint64_t expiry, std::uint64_t queued_ns,
                             std::uint64_t per_launch_ns) noexcept {
  return per_launch_ns == 0 || now + queued_ns + per_launch_ns <= expiry + shm::kCutLeaseOverrunNs;
}

// What a launch of a process whose own figure (GpuTracker::own_per_launch_ns,
// its siblings' time slices taken out) is `own_ns` takes under a cut lease:
// the GPU slices its time among the allocation's processes with work in
// flight, `busy_processes` of them (GpuUsage), and this one (`self_busy`:
// already counted there). Two siblings of 1.5 ms kernels would otherwise
// each start one in a 1.5 ms cut by their own figures and both end at
// about 3 ms, past the cut's kCutLeaseOverrunNs. Siblings weighing at the
// same moment, none of them busy yet, each count only itself (a known gap:
// the overrun is then up to one launch per sibling, charged to the holder).
inline std::uint64_t cut_per_launch_ns(std::uint64_t own_ns, std::uint32_t busy_processes,
                                       bool self_busy) noexcept {
  // The count is the tenant's to write: bounded, so the product stays put.
  const std::uint64_t sharing = std::clamp<std::uint64_t>(
      std::uint64_t{busy_processes} + (self_busy ? 0 : 1), 1, shm::kMaxSlots);
  return own_ns * sharing;
}

// How long a thread that waits for a lease waits on the CPU instead of
// asleep on the lease futex: while the daemon says a grant to its
// allocation on this GPU is near (LimitsRegion::ready_until_ns, ready_gpus),
// so that it needs no wake-up once granted; never more than kMaxReadySpinNs
// in one wait at the gate, whatever the word says. 0: sleep.
inline constexpr std::uint64_t kMaxReadySpinNs = 3'000'000;
inline std::uint64_t ready_spin_ns(std::uint64_t now, std::uint64_t ready_until,
                                   std::uint32_t ready_gpus, unsigned gpu,
                                   std::uint64_t spun_ns) noexcept {
  if (gpu >= 32 || (ready_gpus & (1u << gpu)) == 0 || now >= ready_until ||
      spun_ns >= kMaxReadySpinNs)
    return 0;
  return std::min(ready_until - now, kMaxReadySpinNs - spun_ns);
}

// How much of the queue must run before queue_allows() can say yes.
inline std::uint64_t queue_excess(std::uint64_t now, std::uint64_t expiry, std::uint64_t queued_ns,
                                  std::uint64_t horizon_ns) noexcept {
  std::uint64_t need = queued_ns > horizon_ns ? queued_ns - horizon_ns : 0;
  if (now + queued_ns >= expiry) need = std::max(need, now + queued_ns - expiry + 1);
  return need;
}

// The other allocations in the local duty cycle of a GPU, as a would-be
// borrower sees them: none (nobody to borrow from), one or more with work on
// the GPU (or unreadable), or all of them without.
enum class Neighbours : std::uint8_t { kNone, kBusy, kIdle };

// An allocation's limits on one GPU, as the local duty cycle sees them.
struct DutyCycleView {
  bool capped = false;           // burst runs free when nobody arbitrates
  std::uint64_t quantum_ns = 0;  // 0: kDefaultQuantumNs
  std::uint32_t limit_pct = 100;
  DutySlot slot;              // where it may run (duty_cycle_table.hpp)
  std::uint64_t busy_ns = 0;  // the allocation's busy time since the slot last opened
  // The other allocations of the GPU (duty_neighbours.hpp); read only where
  // duty_cycle_may_borrow() says it matters.
  Neighbours neighbours = Neighbours::kNone;
};

inline std::uint64_t duty_cycle_period_ns(const DutyCycleView& d) noexcept {
  return 10 * (d.quantum_ns != 0 ? d.quantum_ns : kDefaultQuantumNs);
}
// The work still queued will be busy time too: it counts against the budget.
inline DutyStanding duty_standing(const DutyCycleView& d, std::uint64_t queued_ns) noexcept {
  const std::uint64_t period = duty_cycle_period_ns(d);
  return {.period = period,
          .slot = d.slot,
          .budget_ns = period * std::clamp<std::uint32_t>(d.limit_pct, 1, 100) / 100,
          .busy_ns = d.busy_ns + queued_ns};
}
// Nobody charges work that runs past the slot or the budget, so a launch
// whose expected GPU time is `per_launch_ns` goes only while half of that is
// left: the last launch then runs past the end about as often and as long
// as the end's tail stays unused (kernels of 50 us - 20 ms at random: 34.9 %
// for a cap of 30 with a fixed 1 ms lead, 25.5 % with the whole launch as
// the lead). Before the slot's end the queue (up to the horizon) runs on
// after the last launch too: half of it is part of that lead. The budget
// counts the queue itself (duty_standing()).
inline std::uint64_t duty_cycle_slot_lead_ns(std::uint64_t per_launch_ns,
                                             std::uint64_t horizon_ns) noexcept {
  return std::max(per_launch_ns / 2, horizon_ns / 2);
}
inline std::uint64_t duty_cycle_budget_lead_ns(std::uint64_t per_launch_ns) noexcept {
  return per_launch_ns / 2;
}

// Local duty cycle without a daemon: a capped allocation may submit in its
// slot of every period of ten quanta until it has been busy for its limit of
// the period. Returns 0 when it may now, else the time until its slot opens.
inline std::uint64_t duty_cycle_wait_ns(const DutyCycleView& d, std::uint64_t now,
                                        std::uint64_t per_launch_ns, std::uint64_t horizon_ns,
                                        std::uint64_t queued_ns) noexcept {
  if (!d.capped) return 0;
  return duty_wait_ns(now, duty_standing(d, queued_ns),
                      duty_cycle_slot_lead_ns(per_launch_ns, horizon_ns),
                      duty_cycle_budget_lead_ns(per_launch_ns));
}

// Everything one decision looks at, read by the slow path in one go.
struct GateSnapshot {
  std::uint64_t now = 0;              // CLOCK_MONOTONIC
  std::uint64_t lease_expiry_ns = 0;  // this allocation may submit while now < it
  bool lease_cut = false;             // shm::kLeaseCutBit
  std::uint64_t heartbeat_ns = 0;     // the daemon's last tick; 0: it never ticked this region
  // Read only while heartbeat_ns is 0: when this process first found the
  // region unticked in a node run dir that has a daemon's socket (0: no
  // daemon serves the node).
  std::uint64_t unticked_since_ns = 0;
  std::uint64_t queued_ns = 0;  // the tracker's queue estimate at `now`
  std::uint64_t per_launch_ns = 0;
  // The figure a cut lease is weighed by (cut_per_launch_ns(); 0:
  // per_launch_ns).
  std::uint64_t cut_per_launch_ns = 0;
  // queue_horizon_ns() under a daemon's lease, kQueueHorizonNs without one;
  // queued_ns was estimated against it.
  std::uint64_t horizon_ns = kQueueHorizonNs;
  DutyCycleView duty;  // read only while no daemon arbitrates
};

// Whether a daemon arbitrates the GPU: its heartbeat is fresh, or it never
// ticked the region but serves the node and may not have discovered the
// allocation yet (a new region waits for it, as for a lease, rather than
// running unarbitrated, for at most kFirstHeartbeatWaitNs).
inline bool daemon_arbitrates(const GateSnapshot& s) noexcept {
  if (s.heartbeat_ns == 0)
    return s.unticked_since_ns != 0 && s.now < s.unticked_since_ns + shm::kFirstHeartbeatWaitNs;
  return s.now < s.heartbeat_ns + shm::kDaemonHeartbeatStaleNs;
}

// Borrowing without a daemon. Disjoint slots lose every moment a slot's
// owner leaves the GPU idle (its host work between steps, its syncs): with
// 2 ms of host work per 4 ms of GPU work, caps of 30 and 50 would need 124 %
// of the period. So out of its slot an allocation with budget left may run
// while no other allocation of the GPU has work on it, one launch at a time
// per process (kBorrow): an owner that comes back waits for at most that
// launch (the GPU time-slices the two meanwhile). The budget still counts
// every busy moment, so borrowing never takes an allocation past its cap;
// only the other allocations' shares can lose, by that wait.
inline constexpr std::uint64_t kBorrowPollNs = 100'000;  // how often a would-be borrower looks

// Whether the allocation is out of its slot with budget left for a launch:
// then its neighbours' state decides (the slow path reads it only then).
inline bool duty_cycle_may_borrow(const GateSnapshot& s) noexcept {
  if (!s.duty.capped || daemon_arbitrates(s)) return false;
  const DutyStanding d = duty_standing(s.duty, std::min(s.queued_ns, s.horizon_ns));
  const DutyPosition at = duty_position(s.now, d.period, d.slot);
  const bool out_of_slot =
      at.phase + duty_cycle_slot_lead_ns(s.per_launch_ns, s.horizon_ns) >= at.length;
  return out_of_slot && d.busy_ns + duty_cycle_budget_lead_ns(s.per_launch_ns) < d.budget_ns;
}

enum class GateStep {
  kGo,                // the launch may go (and, without a daemon, those of the next `ns`)
  kWaitForProgress,   // let `ns` of the queued work run first
  kWaitForLease,      // ask the daemon for the lease; sleep on its futex at most `ns`
  kWaitForNextLease,  // this launch does not fit the lease held: as above, until it changes
  kSleep,             // the duty-cycle window is closed: sleep `ns`
  kBorrow,            // out of its slot: this launch may go if no other thread's borrowed one is
                      // on its way (the slow path holds one per process and GPU)
};

struct GateAction {
  GateStep step = GateStep::kGo;
  std::uint64_t ns = 0;
  // kWaitForProgress of the queue bound (not the duty cycle's own launch
  // first), with room in the lease (or window) for one launch: one whose
  // stream has nothing queued may start beside the queue instead, and one
  // whose stream caught up with a batch of other streams may keep this
  // much of its own work queued, itself included: the horizon, within what
  // is left of the lease (docs/scheduler.md, "A long kernel on another
  // stream"). 0: not beside.
  std::uint64_t beside_ns = 0;
  bool operator==(const GateAction&) const = default;
};

// How long a go without a daemon stands: the launches of that span take the
// gate's fast path, as under a lease, instead of reading the heartbeat, the
// duty cycle and the queue in the slow path one by one. It bounds how late a
// daemon that starts (or comes back) is noticed, beside the heartbeat's own
// staleness bound.
inline std::uint64_t local_go_ns(const GateSnapshot& s) noexcept {
  const std::uint64_t span = kLocalLeaseHorizons * s.horizon_ns;
  if (!s.duty.capped) return span;
  // Within the span the fast path lets the queue grow to the horizon
  // unseen: the span ends where a full queue would reach the budget's end,
  // and the launches after that are weighed one by one.
  return std::min(span,
                  duty_open_ns(s.now, duty_standing(s.duty, std::max(s.queued_ns, s.horizon_ns)),
                               duty_cycle_slot_lead_ns(s.per_launch_ns, s.horizon_ns),
                               duty_cycle_budget_lead_ns(s.per_launch_ns)));
}

// kGo's `ns`: without a daemon local_go_ns() (0: this launch only); 0 under a
// daemon, whose lease says how long.
inline GateAction decide_gate(const GateSnapshot& s) noexcept {
  std::uint64_t expiry = s.lease_expiry_ns;
  std::uint64_t go_ns = 0;
  if (!daemon_arbitrates(s)) {
    // No arbitration: limits stay in force locally (capped), burst runs.
    // The queue estimate is an upper bound (a long kernel at the head
    // prices every launch behind it like itself): past the horizon, which
    // the gate keeps the queue to, it would end the slot early.
    const std::uint64_t wait = duty_cycle_wait_ns(s.duty, s.now, s.per_launch_ns, s.horizon_ns,
                                                  std::min(s.queued_ns, s.horizon_ns));
    if (wait != 0) {
      if (!duty_cycle_may_borrow(s)) return {GateStep::kSleep, std::min(wait, kLeaseWaitSliceNs)};
      // Its own launch first (the neighbours are read only once it ran).
      if (s.queued_ns != 0) return {GateStep::kWaitForProgress, s.queued_ns};
      if (s.duty.neighbours == Neighbours::kNone)
        return {GateStep::kSleep, std::min(wait, kLeaseWaitSliceNs)};
      if (s.duty.neighbours == Neighbours::kIdle) return {GateStep::kBorrow, 0};
      return {GateStep::kSleep, std::min(wait, kBorrowPollNs)};
    }
    expiry = s.now + kLocalLeaseHorizons * s.horizon_ns;
    go_ns = local_go_ns(s);
  } else if (s.now >= expiry) {
    return {GateStep::kWaitForLease, kLeaseWaitSliceNs};
  } else if (s.lease_cut &&
             !cut_lease_allows(s.now, expiry, s.queued_ns,
                               s.cut_per_launch_ns != 0 ? s.cut_per_launch_ns : s.per_launch_ns)) {
    return {GateStep::kWaitForNextLease, std::min(expiry - s.now, kLeaseWaitSliceNs)};
  }
  // Holding the lease (or a window): enough queued means some of it must finish first.
  if (queue_allows(s.now, expiry, s.queued_ns, s.horizon_ns)) return {GateStep::kGo, go_ns};
  return {.step = GateStep::kWaitForProgress,
          .ns = queue_excess(s.now, expiry, s.queued_ns, s.horizon_ns),
          .beside_ns = s.now + std::max<std::uint64_t>(s.per_launch_ns, 1) < expiry
                           ? std::min(s.horizon_ns, expiry - s.now)
                           : 0};
}

}  // namespace cushare::shim::gate
