// The launch gate's queue estimate (shim/gate/estimate.hpp).
#include "shim/gate/estimate.hpp"

#include <gtest/gtest.h>

namespace cushare::shim::gate {
namespace {

constexpr std::uint64_t kHorizon = 2'000'000;
constexpr std::uint64_t kNow = 1'000'000'000;

TEST(LaunchGateEstimate, NothingPendingIsNothingQueued) {
  EXPECT_EQ(estimate_queued_ns({.pending = 0, .per_launch_ns = 5'000}, kNow, kHorizon), 0u);
}

TEST(LaunchGateEstimate, BeforeAnyMeasurementTwoLaunchesFillTheHorizon) {
  EXPECT_EQ(estimate_queued_ns({.pending = 1}, kNow, kHorizon), 1u);
  EXPECT_GT(estimate_queued_ns({.pending = 2}, kNow, kHorizon), kHorizon);
}

TEST(LaunchGateEstimate, PendingTimesPerLaunchLessWhatRan) {
  // 10 launches of 100 us; the GPU started on them 250 us ago.
  const QueueSnapshot q{
      .pending = 10, .per_launch_ns = 100'000, .since_ns = kNow - 250'000, .head = 4};
  EXPECT_EQ(estimate_queued_ns(q, kNow, kHorizon), 750'000u);
}

TEST(LaunchGateEstimate, NeverBelowOneLaunchWhileSomethingIsPending) {
  const QueueSnapshot q{
      .pending = 3, .per_launch_ns = 100'000, .since_ns = kNow - 290'000, .head = 3};
  EXPECT_EQ(estimate_queued_ns(q, kNow, kHorizon), 100'000u);
}

TEST(LaunchGateEstimate, AHeadRunningPastItsEstimateRaisesThePerLaunchTime) {
  // Learnt 80 us per launch from short kernels; the oldest batch (25
  // launches) has run 10 ms and is not done (seen late by at most the lag):
  // its launches take >= 390 us each, and so, by the estimate, do the 5
  // queued behind it.
  const QueueSnapshot q{
      .pending = 30, .per_launch_ns = 80'000, .since_ns = kNow - 10'000'000, .head = 25};
  const std::uint64_t per = (10'000'000 - kCompletionLagNs) / 25;
  const std::uint64_t queued = estimate_queued_ns(q, kNow, kHorizon);
  EXPECT_GE(queued, 30u * per - 10'000'000u);
  EXPECT_LE(queued, 30u * per - 10'000'000u + 30u);
}

TEST(LaunchGateEstimate, ACompletionSeenLateIsNotALongHead) {
  // 2000 launches of ~200 ns in flight, the head batch (256) due 50 us ago
  // and not seen complete yet: the poller may just be late. The queue stays
  // what the average says, well inside the horizon.
  const QueueSnapshot q{
      .pending = 2000, .per_launch_ns = 200, .since_ns = kNow - 100'000, .head = 256};
  EXPECT_EQ(estimate_queued_ns(q, kNow, kHorizon), 400'000u - 100'000u);
  const QueueSnapshot later{
      .pending = 2000, .per_launch_ns = 200, .since_ns = kNow - 200'000, .head = 256};
  EXPECT_EQ(estimate_queued_ns(later, kNow, kHorizon), 400'000u - 200'000u);
}

TEST(LaunchGateEstimate, TheQueueCannotGrowBehindAStuckHead) {
  // Whatever the elapsed time, launches behind an unfinished head keep
  // counting: the gate admits only about horizon / (elapsed / head) more.
  for (std::uint64_t elapsed = 1'000'000; elapsed <= 1'000'000'000; elapsed *= 10) {
    std::uint64_t pending = 1;
    while (estimate_queued_ns({.pending = pending + 1,
                               .per_launch_ns = 50'000,
                               .since_ns = kNow - elapsed,
                               .head = 1},
                              kNow, kHorizon) <= kHorizon) {
      ++pending;
      ASSERT_LT(pending, 100'000u) << elapsed;
    }
    const std::uint64_t per_head = elapsed;  // one launch in the head, running for `elapsed`
    EXPECT_LE((pending - 1) * per_head, kHorizon + per_head) << elapsed;
  }
}

TEST(LaunchGateEstimate, SlowStartCapsTheLaunchesInFlight) {
  // 80 us learnt from one short kernel would admit 25 launches; a window of
  // 4 (one batch completed) admits 4, whatever the estimate says.
  QueueSnapshot q{.pending = 3, .per_launch_ns = 80'000, .since_ns = kNow, .head = 3, .window = 4};
  EXPECT_LE(estimate_queued_ns(q, kNow, kHorizon), kHorizon);
  q.pending = 4;
  EXPECT_GT(estimate_queued_ns(q, kNow, kHorizon), kHorizon);
  q.window = kMaxWindow;
  EXPECT_LE(estimate_queued_ns(q, kNow, kHorizon), kHorizon);
}

TEST(LaunchGateEstimate, HeadIsClampedToThePendingCount) {
  // Counters read at slightly different times may disagree.
  const QueueSnapshot q{
      .pending = 2, .per_launch_ns = 100'000, .since_ns = kNow - 50'000, .head = 9};
  EXPECT_EQ(estimate_queued_ns(q, kNow, kHorizon), 150'000u);
  const QueueSnapshot z{.pending = 2, .per_launch_ns = 100'000, .since_ns = kNow, .head = 0};
  EXPECT_EQ(estimate_queued_ns(z, kNow, kHorizon), 200'000u);
}

TEST(PerLaunchFigure, AMovingAverageThatSmallBatchesMayOnlyLower) {
  EXPECT_EQ(next_per_launch_ns(0, 1'234'000, false), 1'234'000u);  // the first sample is taken
  EXPECT_EQ(next_per_launch_ns(1'000'000, 2'000'000, true), 1'125'000u);
  EXPECT_EQ(next_per_launch_ns(1'000'000, 2'000'000, false), 1'000'000u);
  EXPECT_EQ(next_per_launch_ns(1'000'000, 200'000, false), 900'000u);
}

TEST(PerLaunchFigure, TheOwnSampleTakesTheSiblingsTimeSlicesOut) {
  // 1 ms kernels time-sliced with a sibling's 20 ms ones measured 2.2 ms a
  // launch: with the two processes busy, 1.1 ms, under the daemon's
  // short-kernel mark (2 ms) as when it runs alone.
  EXPECT_EQ(own_launch_sample_ns(2'200'000, 2), 1'100'000u);
  // Alone (or the count already cleared by the time it is read): whole.
  EXPECT_EQ(own_launch_sample_ns(2'200'000, 1), 2'200'000u);
  EXPECT_EQ(own_launch_sample_ns(2'200'000, 0), 2'200'000u);
  // Never 0 ("not measured"), whatever count a tenant forged.
  EXPECT_EQ(own_launch_sample_ns(2'200'000, 0xffffffffu), 1u);
  EXPECT_EQ(own_launch_sample_ns(1, 3), 1u);
}

TEST(PerLaunchFigure, OneInflatedSampleMovesItLittleAndLongerKernelsAreFollowed) {
  // 1 ms kernels, one batch measured 28 ms (it waited behind another
  // context): the figure stays below the 2.6 ms a 1.6 ms cut lease admits
  // (it went to 4.4 ms unbounded, and its tenant never launched again).
  const std::uint64_t after = next_per_launch_ns(1'010'000, 28'300'000, true);
  EXPECT_LE(after, 2'000'000u);
  EXPECT_GT(after, 1'010'000u);
  // Kernels that became 20 ms long: half-way within ten batches (five
  // without the bound).
  std::uint64_t per = 1'000'000;
  int batches = 0;
  while (per < 10'000'000 && batches < 100) {
    per = next_per_launch_ns(per, 20'000'000, true);
    ++batches;
  }
  EXPECT_LE(batches, 10);
  // And back: smaller samples count in full.
  while (per > 1'100'000 && batches < 200) {
    per = next_per_launch_ns(per, 1'000'000, false);
    ++batches;
  }
  EXPECT_LE(per, 1'100'000u);
}

}  // namespace
}  // namespace cushare::shim::gate
