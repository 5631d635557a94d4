// The launch gate's decisions (shim/gate/gate_decision.hpp), on an injected
// clock: every snapshot is made up, no time passes.
#include "shim/gate/gate_decision.hpp"

#include <gtest/gtest.h>

namespace cushare::shim::gate {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kNow = 1'000 * kMs;
constexpr std::uint64_t kHorizon = kQueueHorizonNs;

// A daemon that ticked a moment ago, and a lease held for 5 ms more.
GateSnapshot holding() {
  return {.now = kNow, .lease_expiry_ns = kNow + 5 * kMs, .heartbeat_ns = kNow - kMs};
}

// No daemon ever ticked the region and none serves the node.
GateSnapshot alone(DutyCycleView duty = {}) {
  return {.now = kNow, .duty = duty};
}

constexpr GateAction kGo{GateStep::kGo, 0};
// Without a daemon a go stands for four horizons (the fast path's local lease).
constexpr GateAction kLocalGo{GateStep::kGo, kLocalLeaseHorizons* kQueueHorizonNs};

// The queue bound's wait: with room left for one launch, one whose stream
// has nothing queued may start beside the queue, and one whose stream caught
// up with a batch of other streams may keep `beside_ns` of its own work
// queued (the horizon, within what is left of the lease).
GateAction progress(std::uint64_t ns, std::uint64_t beside_ns = kHorizon) {
  return {GateStep::kWaitForProgress, ns, beside_ns};
}

TEST(GateDecision, HoldingTheLeaseWithNothingQueuedGoes) {
  EXPECT_EQ(decide_gate(holding()), kGo);
}

TEST(GateDecision, NothingQueuedGoesEvenAtTheLeasesLastNanosecond) {
  GateSnapshot s = holding();
  s.lease_expiry_ns = kNow + 1;
  EXPECT_EQ(decide_gate(s), kGo);
}

TEST(GateDecision, AQueueWithinTheHorizonAndTheLeaseGoes) {
  GateSnapshot s = holding();
  s.queued_ns = kHorizon;
  EXPECT_EQ(decide_gate(s), kGo);
}

TEST(GateDecision, ACutLeaseStartsOnlyLaunchesThatEndAboutAtItsExpiry) {
  // A lease cut for a tenant due back in 1.5 ms: a 1 ms kernel may start
  // (it ends within kCutLeaseOverrunNs of the expiry, as in a lease that is
  // not cut), a 20 ms one of another process of the allocation waits for
  // the next lease rather than keep the returning tenant waiting for it.
  GateSnapshot s = holding();
  s.lease_expiry_ns = kNow + 1'500'000;
  s.lease_cut = true;
  s.per_launch_ns = kMs;
  EXPECT_EQ(decide_gate(s), kGo);
  s.queued_ns = 1'400'000;  // the last one that starts before the expiry
  EXPECT_EQ(decide_gate(s), kGo);
  s.queued_ns = 0;
  s.per_launch_ns = 20 * kMs;
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kWaitForNextLease, 1'500'000}));
  s.lease_cut = false;  // a whole lease: the long kernel goes
  EXPECT_EQ(decide_gate(s), kGo);
  s.lease_cut = true;
  s.per_launch_ns = 0;  // not measured yet: nothing to weigh
  EXPECT_EQ(decide_gate(s), kGo);
  s.per_launch_ns = 2'400'000;  // ends 0.9 ms past the expiry: goes
  EXPECT_EQ(decide_gate(s), kGo);
  s.per_launch_ns = 2'600'000;  // 1.1 ms past: waits
  EXPECT_EQ(decide_gate(s).step, GateStep::kWaitForNextLease);
}

TEST(GateDecision, ACutLeaseWeighsTheFigureWithoutTheSiblingsTimeSlices) {
  // Kernels measured at 2.6 ms a launch beside a sibling's 20 ms ones (the
  // GPU sliced its time between the two): once the sibling has nothing in
  // flight (its long kernels wait for a whole lease), a cut lease weighs
  // them by their own 1.3 ms, and they go.
  GateSnapshot s = holding();
  s.lease_expiry_ns = kNow + 1'500'000;
  s.lease_cut = true;
  s.per_launch_ns = 2'600'000;
  s.cut_per_launch_ns = 1'300'000;
  EXPECT_EQ(decide_gate(s), kGo);
  s.cut_per_launch_ns = 2'600'000;  // the sibling's kernel still in flight
  EXPECT_EQ(decide_gate(s).step, GateStep::kWaitForNextLease);
  s.lease_cut = false;  // a whole lease weighs neither
  EXPECT_EQ(decide_gate(s), kGo);
}

TEST(GateDecision, ACutLeaseFigureCountsTheProcessesThatWouldShareTheGpu) {
  // Alone, or the only process with work in flight: its own figure.
  EXPECT_EQ(cut_per_launch_ns(kMs, 0, false), kMs);
  EXPECT_EQ(cut_per_launch_ns(kMs, 1, true), kMs);
  // A sibling's work in flight: this launch shares the GPU with it.
  EXPECT_EQ(cut_per_launch_ns(kMs, 1, false), 2 * kMs);
  EXPECT_EQ(cut_per_launch_ns(kMs, 2, true), 2 * kMs);
  // A forged count is bounded by the slots an allocation has.
  EXPECT_EQ(cut_per_launch_ns(kMs, 0xffffffffu, false), kMs * shm::kMaxSlots);
}

TEST(GateDecision, AQueuePastTheHorizonWaitsForItsExcess) {
  GateSnapshot s = holding();
  s.queued_ns = kHorizon + 300'000;
  EXPECT_EQ(decide_gate(s), progress(300'000));
}

TEST(GateDecision, AQueueRunningPastTheLeaseWaitsUntilItEndsInside) {
  GateSnapshot s = holding();
  s.lease_expiry_ns = kNow + kMs;
  s.queued_ns = 1'500'000;  // within the horizon, but 0.5 ms past the lease
  EXPECT_EQ(decide_gate(s), progress(500'001, kMs));
}

// A launch may go beside the queue (its stream idle, or caught up, behind a
// batch of other streams) only where one launch still fits the lease,
// and its stream keeps at most the horizon, and what is left of the lease,
// queued.
TEST(GateDecision, BesideTheQueueOnlyWithRoomForOneLaunchInTheLease) {
  GateSnapshot s = holding();
  s.queued_ns = kHorizon + 300'000;
  s.per_launch_ns = kMs;
  EXPECT_EQ(decide_gate(s), progress(300'000, kHorizon));
  s.queued_ns = 1'500'000;         // past the lease's end below
  s.lease_expiry_ns = kNow + kMs;  // one launch would end at the expiry
  EXPECT_EQ(decide_gate(s), progress(500'001, 0));
  s.lease_expiry_ns = kNow + kMs + 1;  // its stream's own queue: what is left of the lease
  EXPECT_EQ(decide_gate(s), progress(500'000, kMs + 1));
}

TEST(GateDecision, TheLargerOfTheTwoExcessesCounts) {
  GateSnapshot s = holding();
  s.lease_expiry_ns = kNow + 1'800'000;
  s.queued_ns = kHorizon + 100'000;  // 0.1 ms past the horizon, 0.3 ms past the lease
  EXPECT_EQ(decide_gate(s), progress(300'001, 1'800'000));
  s.lease_expiry_ns = kNow + 10 * kMs;  // now only the horizon binds
  EXPECT_EQ(decide_gate(s), progress(100'000));
}

TEST(GateDecision, WithoutALeaseAsksForOneAndSleepsASliceAtMost) {
  GateSnapshot s = holding();
  s.lease_expiry_ns = kNow;  // expired just now
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kWaitForLease, kLeaseWaitSliceNs}));
  s.lease_expiry_ns = 0;  // never granted
  EXPECT_EQ(decide_gate(s).step, GateStep::kWaitForLease);
}

TEST(GateDecision, AStaleHeartbeatMeansNoDaemon) {
  GateSnapshot s = holding();
  s.lease_expiry_ns = 0;
  s.heartbeat_ns = kNow - shm::kDaemonHeartbeatStaleNs + 1;
  EXPECT_TRUE(daemon_arbitrates(s));
  EXPECT_EQ(decide_gate(s).step, GateStep::kWaitForLease);
  s.heartbeat_ns = kNow - shm::kDaemonHeartbeatStaleNs;
  EXPECT_FALSE(daemon_arbitrates(s));
  EXPECT_EQ(decide_gate(s), kLocalGo);  // burst: runs free
}

TEST(GateDecision, AnUntickedRegionWaitsForTheNodesDaemonAWhile) {
  GateSnapshot s = alone();
  s.unticked_since_ns = kNow - shm::kFirstHeartbeatWaitNs + 1;
  EXPECT_TRUE(daemon_arbitrates(s));
  EXPECT_EQ(decide_gate(s).step, GateStep::kWaitForLease);
  s.unticked_since_ns = kNow - shm::kFirstHeartbeatWaitNs;  // waited long enough
  EXPECT_FALSE(daemon_arbitrates(s));
  EXPECT_EQ(decide_gate(s), kLocalGo);
}

TEST(GateDecision, AnUntickedRegionWithoutADaemonOnTheNodeRunsAtOnce) {
  EXPECT_FALSE(daemon_arbitrates(alone()));
  EXPECT_EQ(decide_gate(alone()), kLocalGo);
}

TEST(GateDecision, WithoutADaemonTheQueueIsStillPaced) {
  GateSnapshot s = alone();
  s.lease_expiry_ns = kNow + 50 * kMs;  // a stale lease counts for nothing
  s.queued_ns = kHorizon;
  EXPECT_EQ(decide_gate(s), kLocalGo);
  s.queued_ns = kHorizon + 1;
  EXPECT_EQ(decide_gate(s), progress(1));
  s.lease_expiry_ns = 0;  // nor does a missing one
  EXPECT_EQ(decide_gate(s), progress(1));
}

// Capped at 30 %, quantum 10 ms: a window of 30 ms of every 100 ms, opening
// `offset` % into the period.
DutyCycleView capped30(std::uint32_t offset = 0) {
  return {.capped = true,
          .quantum_ns = 10 * kMs,
          .limit_pct = 30,
          .slot = {.offset_ppm = offset * 10'000, .length_ppm = 300'000}};
}

TEST(GateDecision, ACappedAllocationWithoutADaemonGoesInsideItsWindow) {
  GateSnapshot s = alone(capped30());
  s.now = 100 * kMs * 50 + 10 * kMs;  // 10 ms into the period
  EXPECT_EQ(decide_gate(s), kLocalGo);
  s.queued_ns = kHorizon + 5;  // paced there too
  EXPECT_EQ(decide_gate(s), progress(5));
}

TEST(GateDecision, ACappedAllocationWithoutADaemonSleepsOutsideItsWindow) {
  GateSnapshot s = alone(capped30());
  s.now = 100 * kMs * 50 + 95 * kMs;  // 5 ms before the next period
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kSleep, 5 * kMs}));
  s.now = 100 * kMs * 50 + 40 * kMs;  // 60 ms to go: one slice, then look again
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kSleep, kLeaseWaitSliceNs}));
}

TEST(GateDecision, TheLastLaunchOfAWindowNeedsHalfItsTimeLeft) {
  GateSnapshot s = alone(capped30());
  s.now = 100 * kMs * 50 + 29 * kMs;  // 1 ms left: half the horizon, no more
  EXPECT_EQ(decide_gate(s).step, GateStep::kSleep);
  s.now = 100 * kMs * 50 + 28 * kMs + 1;
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kGo, kMs - 1}));  // to the last launch
  s.per_launch_ns = 6 * kMs;                                        // a long kernel wants 3 ms left
  EXPECT_EQ(decide_gate(s).step, GateStep::kSleep);
}

TEST(GateDecision, TheWindowOpensAtItsOffset) {
  GateSnapshot s = alone(capped30(50));
  s.now = 100 * kMs * 50 + 10 * kMs;
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kSleep, kLeaseWaitSliceNs}));
  s.now = 100 * kMs * 50 + 45 * kMs;
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kSleep, 5 * kMs}));
  s.now = 100 * kMs * 50 + 60 * kMs;
  EXPECT_EQ(decide_gate(s), kLocalGo);
}

TEST(GateDecision, ALocalGoEndsWhereTheSlotsLastLaunchMayGo) {
  GateSnapshot s = alone(capped30());
  s.now = 100 * kMs * 50 + 25 * kMs;  // 5 ms left, a lead of half the horizon
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kGo, 4 * kMs}));
  s.per_launch_ns = 4 * kMs;  // a longer kernel's lead is half of it
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kGo, 3 * kMs}));
  // Launches over the whole of a go pass the gate's window test on their own.
  for (std::uint64_t t = s.now; t < s.now + 3 * kMs; t += kMs / 4)
    EXPECT_EQ(duty_cycle_wait_ns(s.duty, t, s.per_launch_ns, kHorizon, 0), 0u) << t;
  EXPECT_NE(duty_cycle_wait_ns(s.duty, s.now + 3 * kMs, s.per_launch_ns, kHorizon, 0), 0u);
}

TEST(GateDecision, ACappedAllocationMakesUpItsOwnIdleTimeInItsSlot) {
  DutyCycleView d = capped30();
  d.slot.length_ppm = 375'000;  // beside a cap of 50: 37.5 ms of every 100
  GateSnapshot s = alone(d);
  s.now = 100 * kMs * 50 + 32 * kMs;  // past 30 ms of wall time, but idle for 7 of them
  s.per_launch_ns = 2 * kMs;          // a lead of 1 ms before either end
  s.duty.busy_ns = 25 * kMs;
  // The go ends where a queue grown to the horizon would reach 29 ms busy.
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kGo, 2 * kMs}));
  s.duty.busy_ns = 27 * kMs;  // closer: this launch may go, the next is weighed again
  EXPECT_EQ(decide_gate(s), kGo);
  s.queued_ns = 2 * kMs;  // queued work will be busy time too
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kSleep, kLeaseWaitSliceNs}));
  s.queued_ns = 0;
  s.duty.busy_ns = 29 * kMs + 1;  // its budget (less the lead) is spent
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kSleep, kLeaseWaitSliceNs}));
  s.now = 100 * kMs * 50 + 90 * kMs;
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kSleep, 10 * kMs}));
}

// Caps of 30 and 50 beside each other: this allocation's slot is the
// first 37.5 ms of every 100; at 60 ms it is in the other's slot.
GateSnapshot out_of_slot(std::uint64_t busy_ns, Neighbours neighbours) {
  DutyCycleView d = capped30();
  d.slot.length_ppm = 375'000;
  d.busy_ns = busy_ns;
  d.neighbours = neighbours;
  GateSnapshot s = alone(d);
  s.now = 100 * kMs * 50 + 60 * kMs;
  s.per_launch_ns = kMs;
  return s;
}

TEST(GateDecision, OutOfItsSlotAnAllocationBorrowsOneLaunchAtATimeWhileTheOthersAreIdle) {
  GateSnapshot s = out_of_slot(20 * kMs, Neighbours::kIdle);
  EXPECT_TRUE(duty_cycle_may_borrow(s));
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kBorrow, 0}));  // this launch only
  // Its launch still runs: let it finish first. Out of its slot, nothing
  // goes beside it (the slot is another allocation's).
  s.queued_ns = kMs / 2;
  EXPECT_EQ(decide_gate(s), progress(kMs / 2, 0));
  s.duty.neighbours = Neighbours::kNone;  // not read while it runs: still a wait for it
  EXPECT_EQ(decide_gate(s), progress(kMs / 2, 0));
  s.queued_ns = 0;
  s.duty.neighbours = Neighbours::kBusy;  // the slot's owner is back: look again soon
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kSleep, kBorrowPollNs}));
}

TEST(GateDecision, BorrowingNeverTakesAnAllocationPastItsBudget) {
  GateSnapshot s = out_of_slot(29 * kMs + kMs / 2, Neighbours::kIdle);  // half a launch left
  EXPECT_FALSE(duty_cycle_may_borrow(s));
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kSleep, kLeaseWaitSliceNs}));
  s.duty.busy_ns = 29 * kMs;
  s.queued_ns = kMs / 2;  // what is queued counts against the budget too
  EXPECT_FALSE(duty_cycle_may_borrow(s));
}

TEST(GateDecision, WithNobodyToBorrowFromAnAllocationSleepsToItsSlot) {
  GateSnapshot s = out_of_slot(0, Neighbours::kNone);
  EXPECT_TRUE(duty_cycle_may_borrow(s));
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kSleep, kLeaseWaitSliceNs}));
  s.now = 100 * kMs * 50 + 95 * kMs;
  EXPECT_EQ(decide_gate(s), (GateAction{GateStep::kSleep, 5 * kMs}));
}

TEST(GateDecision, InItsSlotOrUnderADaemonNobodyBorrows) {
  GateSnapshot s = out_of_slot(0, Neighbours::kIdle);
  s.now = 100 * kMs * 50 + 10 * kMs;  // in its own slot
  EXPECT_FALSE(duty_cycle_may_borrow(s));
  s = out_of_slot(0, Neighbours::kIdle);
  s.heartbeat_ns = s.now - kMs;  // a daemon arbitrates: leases decide
  EXPECT_FALSE(duty_cycle_may_borrow(s));
  DutyCycleView burst;  // burst runs free without a daemon anyway
  burst.neighbours = Neighbours::kIdle;
  EXPECT_FALSE(duty_cycle_may_borrow(alone(burst)));
}

TEST(GateDecision, NoQuantumMeansTheDefaultPeriod) {
  DutyCycleView d = capped30();
  d.quantum_ns = 0;
  EXPECT_EQ(duty_cycle_wait_ns(d, 100 * kMs * 50 + 95 * kMs, 0, kHorizon, 0), 5 * kMs);
  d.quantum_ns = 20 * kMs;  // period 200 ms, window 60 ms
  EXPECT_EQ(duty_cycle_wait_ns(d, 200 * kMs * 50 + 195 * kMs, 0, kHorizon, 0), 5 * kMs);
  EXPECT_EQ(duty_cycle_wait_ns(d, 200 * kMs * 50 + 50 * kMs, 0, kHorizon, 0), 0u);
}

TEST(GateDecision, TheDutyCycleIsIgnoredWhileADaemonArbitrates) {
  GateSnapshot s = holding();
  s.duty = capped30();
  s.now = 100 * kMs * 50 + 95 * kMs;  // outside the window
  s.lease_expiry_ns = s.now + 5 * kMs;
  s.heartbeat_ns = s.now - kMs;
  EXPECT_EQ(decide_gate(s), kGo);
}

TEST(QueueHorizon, IsTheBaseHorizonWithinAOneQuantumLease) {
  EXPECT_EQ(queue_horizon_ns(kNow, kNow + kDefaultQuantumNs), kQueueHorizonNs + kMs / 2);
  EXPECT_EQ(queue_horizon_ns(kNow, kNow + 5 * kMs), kHorizon);
  EXPECT_EQ(queue_horizon_ns(kNow, kNow + 1), kHorizon);
}

TEST(QueueHorizon, GrowsWithALongLeaseUpToItsCeiling) {
  EXPECT_EQ(queue_horizon_ns(kNow, kNow + 20 * kMs), 5 * kMs);
  EXPECT_EQ(queue_horizon_ns(kNow, kNow + 40 * kMs), kMaxQueueHorizonNs);
  EXPECT_EQ(queue_horizon_ns(kNow, kNow + 4'000 * kMs), kMaxQueueHorizonNs);
}

TEST(QueueHorizon, AnExpiredLeaseGetsTheBaseHorizon) {
  EXPECT_EQ(queue_horizon_ns(kNow, kNow - kMs), kHorizon);
  EXPECT_EQ(queue_horizon_ns(kNow, 0), kHorizon);
}

TEST(GateDecision, ALongLeasesDeeperQueueStillEndsInsideTheLease) {
  // A lone holder's lease 40 ms ahead: 8 ms may be queued, not 8 ms and more.
  GateSnapshot s = holding();
  s.lease_expiry_ns = kNow + 40 * kMs;
  s.horizon_ns = queue_horizon_ns(s.now, s.lease_expiry_ns);
  s.queued_ns = 7 * kMs;
  EXPECT_EQ(decide_gate(s), kGo);
  s.queued_ns = kMaxQueueHorizonNs + kMs;
  EXPECT_EQ(decide_gate(s), progress(kMs, kMaxQueueHorizonNs));
  // Cut back to 5 ms when another tenant arrives: the horizon shrinks with it.
  s.lease_expiry_ns = kNow + 5 * kMs;
  s.horizon_ns = queue_horizon_ns(s.now, s.lease_expiry_ns);
  s.queued_ns = 3 * kMs;
  EXPECT_EQ(decide_gate(s), progress(kMs));
}

TEST(GateDecision, QueueAllowsAndExcessAgree) {
  // queue_allows() is what the fast path asks; the excess is zero exactly
  // when it says yes (with something queued).
  const std::uint64_t queues[] = {1, kHorizon / 2, kHorizon, kHorizon + 1, 3 * kHorizon};
  const std::uint64_t lefts[] = {1, kHorizon / 2, kHorizon, kHorizon + 1, 10 * kHorizon};
  for (const std::uint64_t queued : queues) {
    for (const std::uint64_t left : lefts) {
      const bool allows = queue_allows(kNow, kNow + left, queued, kHorizon);
      EXPECT_EQ(allows, queue_excess(kNow, kNow + left, queued, kHorizon) == 0)
          << queued << " queued, " << left << " left";
    }
  }
}

TEST(ReadySpin, OnTheCpuOnlyWhileTheDaemonsWindowForThisGpuIsOpenAndWithinTheBound) {
  constexpr std::uint64_t kMs = 1'000'000;
  EXPECT_EQ(ready_spin_ns(1000, 0, 0, 0, 0), 0u);           // never told (an older daemon)
  EXPECT_EQ(ready_spin_ns(1000, 5000, 0b10, 0, 0), 0u);     // told for another GPU
  EXPECT_EQ(ready_spin_ns(1000, 5000, 0b01, 0, 0), 4000u);  // until the window closes
  EXPECT_EQ(ready_spin_ns(6000, 5000, 0b01, 0, 0), 0u);     // closed
  // Whatever the word says, at most kMaxReadySpinNs in one wait at the gate.
  EXPECT_EQ(ready_spin_ns(0, 10 * kMs, 1, 0, 0), kMaxReadySpinNs);
  EXPECT_EQ(ready_spin_ns(0, 10 * kMs, 1, 0, kMaxReadySpinNs - 5), 5u);
  EXPECT_EQ(ready_spin_ns(0, 10 * kMs, 1, 0, kMaxReadySpinNs), 0u);
  EXPECT_EQ(ready_spin_ns(0, 10 * kMs, 0xffffffffu, 40, 0), 0u);  // beyond the mask
}

}  // namespace
}  // namespace cushare::shim::gate
