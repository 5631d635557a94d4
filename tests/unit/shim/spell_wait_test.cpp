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

}  // namespace
}  // namespace cushare::shim::gate
