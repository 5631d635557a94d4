// When a query of the application's work is a wait (shim/gate/poll_wait.hpp).
#include "shim/gate/poll_wait.hpp"

#include <gtest/gtest.h>

namespace cushare::shim::gate {
namespace {

constexpr std::uint64_t kT = 5'000'000'000;  // somewhere on the gate's clock

// A process that launched 40 kernels, the last at kT, and queried once
// since, finding the work pending.
PollView waiting(std::uint64_t now) {
  return {.has_tail = true, .launches = 40, .not_ready_at = 40, .tail_last_ns = kT, .now_ns = now};
}

TEST(PollWait, ASecondQueryAfterTheQuietTimeRecordsTheTail) {
  EXPECT_TRUE(poll_records_tail(waiting(kT + kPollQuietNs)));
  EXPECT_TRUE(poll_records_tail(waiting(kT + 60'000)));  // a poll loop's sleep later
}

TEST(PollWait, NotBeforeTheProcessWasQuietForTheQuietTime) {
  EXPECT_FALSE(poll_records_tail(waiting(kT + kPollQuietNs - 1)));
  EXPECT_FALSE(poll_records_tail(waiting(kT)));
}

// A second query long after the last launch, but one thing differs.
PollView later_with(PollView (*change)(PollView)) {
  return change(waiting(kT + 1'000'000));
}

TEST(PollWait, TheFirstQueryIsNoWait) {
  // An allocator that looks at an event once per allocation never found
  // work pending with no launch since.
  EXPECT_FALSE(poll_records_tail(later_with([](PollView v) {
    v.not_ready_at = kNoLaunchCount;
    return v;
  })));
}

TEST(PollWait, ALaunchBetweenTwoQueriesMakesTheSecondNoWait) {
  // A thread that keeps launching while another polls: the batches stay as
  // they are.
  EXPECT_FALSE(poll_records_tail(later_with([](PollView v) {
    v.not_ready_at = 39;
    return v;
  })));
}

TEST(PollWait, NothingToRecordWithoutATail) {
  EXPECT_FALSE(poll_records_tail(later_with([](PollView v) {
    v.has_tail = false;
    return v;
  })));
}

TEST(PollWait, ATailThatCouldNotBeRecordedWaitsForTheNextLaunch) {
  PollView v = waiting(kT + 1'000'000);
  v.declined_at = 40;
  EXPECT_FALSE(poll_records_tail(v));
  v.launches = v.not_ready_at = 41;  // launched again, and found pending again
  EXPECT_TRUE(poll_records_tail(v));
}

TEST(PollWait, TheLaunchingThreadsPendingQueryRecordsAtOnce) {
  // A loop that launches, then polls: recorded while the kernel runs, the
  // tail's event dates its completion.
  EXPECT_TRUE(
      pending_query_records_tail({.has_tail = true, .launches = 40}, {.made_last_launch = true}));
}

TEST(PollWait, AnotherThreadsPendingQueryDoesNot) {
  // An event manager's thread beside the launching one: the second-query
  // rule above decides for it.
  EXPECT_FALSE(pending_query_records_tail({.has_tail = true, .launches = 40},
                                          {.made_last_launch = false, .pending_before = true}));
}

TEST(PollWait, AThreadThatLaunchedInsteadOfWaitingRecordsOnlyAtASecondQuery) {
  // An allocator that looks at its blocks' events before each launch: after
  // one record it launched again without querying, so one query is no wait.
  const PollView v{.has_tail = true, .launches = 41};
  EXPECT_FALSE(
      pending_query_records_tail(v, {.made_last_launch = true, .waited_last_time = false}));
  EXPECT_TRUE(pending_query_records_tail(
      v, {.made_last_launch = true, .waited_last_time = false, .pending_before = true}));
}

TEST(PollWait, APendingQueryRecordsNothingThatIsRecordedOrCouldNotBe) {
  const QueryingThread me{.made_last_launch = true};
  EXPECT_FALSE(pending_query_records_tail({.has_tail = false, .launches = 40}, me));
  EXPECT_FALSE(
      pending_query_records_tail({.has_tail = true, .launches = 40, .declined_at = 40}, me));
}

}  // namespace
}  // namespace cushare::shim::gate
