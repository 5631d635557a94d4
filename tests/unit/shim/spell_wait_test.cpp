// A spell's wait for the GPU, bounded from below (shim/gate/spell_wait.hpp).
#include "shim/gate/spell_wait.hpp"

#include <gtest/gtest.h>

namespace cushare::shim::gate {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kT = 7'000 * kMs;  // somewhere on CLOCK_MONOTONIC

TEST(SpellWait, AnEventCompletesNoEarlierThanItWasRecorded) {
  EXPECT_EQ(completed_no_earlier_than(kT, 0, 3 * kMs), kT);             // no earlier bound
  EXPECT_EQ(completed_no_earlier_than(kT, kT - 9 * kMs, 3 * kMs), kT);  // the chain says less
}

TEST(SpellWait, TheChainCarriesABoundLessTheClocksDrift) {
  // The spell's end completed no earlier than 10 ms past a start known to
  // 1 ms before it was recorded: 1 ms later, less the drift of 10 ms.
  const std::uint64_t lo = completed_no_earlier_than(kT, kT - 9 * kMs, 10 * kMs);
  EXPECT_LT(lo, kT + 1 * kMs);
  EXPECT_GE(lo, kT + 1 * kMs - 10 * kMs * kClockDriftPpm / 1'000'000 - kTimestampSlackNs);
}

TEST(SpellWait, AChainTooLongSaysNothing) {
  EXPECT_EQ(completed_no_earlier_than(kT, kT - 1 * kMs, kWaitChainSpanNs + 1), kT);
  // At the limit it still says something.
  EXPECT_GT(completed_no_earlier_than(kT - kWaitChainSpanNs, kT - 2 * kMs, kWaitChainSpanNs),
            kT - kWaitChainSpanNs);
}

TEST(SpellWait, NoGpuTimeBetweenTwoEventsCarriesTheBoundLessTheSlack) {
  EXPECT_EQ(completed_no_earlier_than(0, kT, 0), kT - kTimestampSlackNs);
  EXPECT_EQ(completed_no_earlier_than(1, 1, 0), 1u);  // never below zero, nor the record
}

TEST(SpellWait, AWaitBehindAnotherContextIsMeasuredNeverOverstated) {
  // The last spell ended no earlier than kT; the gap on the GPU's clock
  // lasted 3 ms to the next spell's first event, but that spell began only
  // 2 ms after kT: it waited about 1 ms for the GPU.
  const std::uint64_t begun = kT + 2 * kMs;
  const std::uint64_t started = completed_no_earlier_than(begun, kT, 3 * kMs);
  const std::uint64_t wait = spell_wait_ns(begun, started);
  EXPECT_LE(wait, 1 * kMs);
  EXPECT_GE(wait, 1 * kMs - 3 * kMs * kClockDriftPpm / 1'000'000 - kTimestampSlackNs);
  // An event that completed as it was recorded: no wait.
  EXPECT_EQ(spell_wait_ns(begun, completed_no_earlier_than(begun, kT, 2 * kMs)), 0u);
  // A bound from a chain that knows less (its end known only from its
  // recording, 2 ms before it completed) gives less, not more.
  EXPECT_LT(spell_wait_ns(begun, completed_no_earlier_than(begun, kT - 2 * kMs, 3 * kMs)), wait);
}

TEST(UnseenIdle, AProbeSeenAtOnceDatesTheSpellsEndFromAbove) {
  // The last kernel ended at kT; a thread woken 80 us late saw it then and
  // counted the gap from there. The next spell's probe, recorded and seen
  // complete at kT + 200 us, ran 200 us after that end on the GPU's clock:
  // the 80 us were idle too, less the clocks' slack.
  const std::uint64_t us = 1'000;
  const std::uint64_t unseen = unseen_idle_ns(kT + 80 * us, kT + 200 * us, 200 * us, 0);
  EXPECT_LE(unseen, 80 * us);
  EXPECT_GE(unseen, 80 * us - kTimestampSlackNs - 200 * us * kClockDriftPpm / 1'000'000);
}

TEST(UnseenIdle, NeverMoreThanTheGpuIdled) {
  const std::uint64_t us = 1'000;
  // A probe seen late (it waited, or the query came late) says less, never more.
  EXPECT_LT(unseen_idle_ns(kT + 80 * us, kT + 250 * us, 200 * us, 0),
            unseen_idle_ns(kT + 80 * us, kT + 200 * us, 200 * us, 0));
  // The CPU's clock already counted from the end: nothing to add.
  EXPECT_EQ(unseen_idle_ns(kT, kT + 200 * us, 200 * us, 0), 0u);
  // Nothing before the floor (the period's start, or the spell's last submission).
  EXPECT_EQ(unseen_idle_ns(kT + 80 * us, kT + 200 * us, 200 * us, kT + 50 * us), 30 * us);
  EXPECT_EQ(unseen_idle_ns(kT + 80 * us, kT + 200 * us, 200 * us, kT + 90 * us), 0u);
}

TEST(UnseenIdle, NothingWithoutAnObservation) {
  const std::uint64_t us = 1'000;
  EXPECT_EQ(unseen_idle_ns(kT, 0, 200 * us, 0), 0u);             // the probe was not seen
  EXPECT_EQ(unseen_idle_ns(0, kT + 200 * us, 200 * us, 0), 0u);  // no gap was counted
  EXPECT_EQ(unseen_idle_ns(kT, kT + 1 * kMs, kWaitChainSpanNs + 1, 0), 0u);  // too long to trust
  EXPECT_EQ(unseen_idle_ns(5 * us, 1 * us, 200 * us, 0), 0u);  // a gap longer than the clock
}

}  // namespace
}  // namespace cushare::shim::gate
