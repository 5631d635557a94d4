// The simulated engine on a fake clock: round-robin time slices, preemption
// at slice boundaries, stream order, events, queue bounds and memory.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/fakegpu/core/config.hpp"
#include "tests/fakegpu/core/engine.hpp"
#include "tests/fakegpu/core/quantity.hpp"
#include "tests/fakegpu/core/shared_allocations.hpp"
#include "tests/fakegpu/core/state_file.hpp"

namespace fakegpu {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kT0 = 1'000 * kMs;  // arbitrary start of the fake monotonic clock

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = std::make_unique<SharedState>();
    Config config;
    config.devices = {{"H100-80GB", 80ull << 30, 132, 9, 0}, {"T4", 16ull << 30, 40, 7, 5}};
    config.timeslice_ns = 2 * kMs;
    init_state_contents(*state_, config, 42, kT0);
    for (int i = 0; i < 2; ++i) {
      state_->procs[i].state = SlotState::live;
      state_->procs[i].pid = 100 + i;
      state_->procs[i].registered_ns = kT0;
    }
  }
  SharedState& s() { return *state_; }
  int32_t context(int32_t proc, uint32_t device = 0) {
    bool oom = false;
    int32_t c = create_context(s(), proc, device, 300ull << 20, kT0, &oom);
    EXPECT_GE(c, 0);
    return c;
  }
  uint64_t kernel(int32_t ctx, uint64_t ns, uint64_t at = kT0, Lane lane = {}) {
    return enqueue(s(), ctx, ItemKind::kernel, ns, -1, 0, kQueueCap, at, lane);
  }
  // A new event slot; *first (if asked) the ticket its records start after.
  int32_t event(int32_t proc, uint64_t* first = nullptr) {
    uint64_t base = 0;
    const int32_t e = create_event(s(), proc, &base);
    EXPECT_GE(e, 0);
    if (first) *first = base;
    return e;
  }
  uint64_t marker(int32_t ctx, int32_t e, uint64_t ticket, uint64_t at = kT0, Lane lane = {}) {
    return enqueue(s(), ctx, ItemKind::marker, 0, e, ticket, kQueueCap, at, lane);
  }
  std::unique_ptr<SharedState> state_;
};

TEST_F(EngineTest, LoneContextRunsBackToBack) {
  int32_t a = context(0);
  for (int i = 0; i < 10; ++i) kernel(a, kMs);
  advance_all(s(), kT0 + 5 * kMs);
  EXPECT_TRUE(context_done_through(s(), a, 5));
  EXPECT_FALSE(context_done_through(s(), a, 6));
  EXPECT_EQ(s().devices[0].busy_ns, 5 * kMs);
  advance_all(s(), kT0 + 50 * kMs);
  EXPECT_TRUE(context_done_through(s(), a, 10));
  EXPECT_EQ(s().contexts[a].last_done_ns, kT0 + 10 * kMs);
  EXPECT_EQ(s().procs[0].busy[0], 10 * kMs);
}

TEST_F(EngineTest, LoneLongKernelIsNotPreempted) {
  int32_t a = context(0);
  kernel(a, 10 * kMs);
  advance_all(s(), kT0 + 10 * kMs);
  EXPECT_TRUE(context_done_through(s(), a, 1));
  EXPECT_EQ(s().contexts[a].last_done_ns, kT0 + 10 * kMs);
}

TEST_F(EngineTest, TwoContextsAlternateInTimeslices) {
  int32_t a = context(0), b = context(1);
  for (int i = 0; i < 100; ++i) kernel(a, kMs / 2);
  for (int i = 0; i < 100; ++i) kernel(b, kMs / 2);
  advance_all(s(), kT0 + 3 * kMs);
  EXPECT_EQ(s().procs[0].busy[0], 2 * kMs);  // A had the first slice
  EXPECT_EQ(s().procs[1].busy[0], 1 * kMs);
  advance_all(s(), kT0 + 40 * kMs);
  EXPECT_EQ(s().procs[0].busy[0], 20 * kMs);
  EXPECT_EQ(s().procs[1].busy[0], 20 * kMs);
  advance_all(s(), kT0 + 1000 * kMs);
  EXPECT_EQ(s().devices[0].busy_ns, 100 * kMs);  // never idle while work waited
  EXPECT_EQ(std::max(s().contexts[a].last_done_ns, s().contexts[b].last_done_ns), kT0 + 100 * kMs);
}

TEST_F(EngineTest, LongKernelsArePreemptedAtSliceBoundaries) {
  int32_t a = context(0), b = context(1);
  kernel(a, 10 * kMs);
  kernel(b, 10 * kMs);
  advance_all(s(), kT0 + 100 * kMs);
  // Slices of 2 ms alternate: A runs [0,2) [4,6) ... [16,18), B ends at 20.
  EXPECT_EQ(s().contexts[a].last_done_ns, kT0 + 18 * kMs);
  EXPECT_EQ(s().contexts[b].last_done_ns, kT0 + 20 * kMs);
}

TEST_F(EngineTest, ContextsOnDifferentDevicesRunInParallel) {
  int32_t a = context(0, 0), b = context(1, 1);
  kernel(a, 10 * kMs);
  kernel(b, 10 * kMs);
  advance_all(s(), kT0 + 100 * kMs);
  EXPECT_EQ(s().contexts[a].last_done_ns, kT0 + 10 * kMs);
  EXPECT_EQ(s().contexts[b].last_done_ns, kT0 + 10 * kMs);
}

TEST_F(EngineTest, LateArrivalWaitsAtMostOneSlice) {
  int32_t a = context(0), b = context(1);
  kernel(a, 100 * kMs);
  advance_all(s(), kT0 + 50 * kMs);
  kernel(b, 1 * kMs, kT0 + 50 * kMs);
  advance_all(s(), kT0 + 200 * kMs);
  EXPECT_LE(s().contexts[b].last_done_ns, kT0 + 53 * kMs);
  EXPECT_GE(s().contexts[b].last_done_ns, kT0 + 51 * kMs);  // not before it arrived
  EXPECT_EQ(s().contexts[a].last_done_ns, kT0 + 101 * kMs);
  EXPECT_EQ(s().procs[0].busy[0], 100 * kMs);
  EXPECT_EQ(s().procs[1].busy[0], 1 * kMs);
}

// A lone context running through a step longer than a slice, then a marker
// of another context: the marker completes after it was submitted, and the
// busy time adds up to the time that passed.
TEST_F(EngineTest, AnArrivalAfterALongLoneStepIsNeverDatedBeforeItsSubmission) {
  int32_t a = context(0), b = context(1);
  int32_t e = event(1);
  kernel(a, 20 * kMs);
  advance_all(s(), kT0 + 1 * kMs);
  advance_all(s(), kT0 + 9 * kMs);  // one lone step of 8 ms
  enqueue(s(), b, ItemKind::marker, 0, e, 1, kQueueCap, kT0 + 9 * kMs);
  advance_all(s(), kT0 + 30 * kMs);
  ASSERT_EQ(s().events[e].completed, 1u);
  EXPECT_GE(s().events[e].time_ns, kT0 + 9 * kMs);
  EXPECT_LE(s().events[e].time_ns, kT0 + 11 * kMs);
  EXPECT_EQ(s().procs[0].busy[0], 20 * kMs);
  EXPECT_EQ(s().contexts[a].last_done_ns, kT0 + 20 * kMs);
  EXPECT_EQ(s().devices[0].busy_ns, 20 * kMs);
}

TEST_F(EngineTest, EventMarkersCompleteInStreamOrder) {
  int32_t a = context(0);
  int32_t e1 = event(0), e2 = event(0);
  kernel(a, 3 * kMs);
  enqueue(s(), a, ItemKind::marker, 0, e1, 1, kQueueCap, kT0);
  kernel(a, 2 * kMs);
  enqueue(s(), a, ItemKind::marker, 0, e2, 1, kQueueCap, kT0);
  advance_all(s(), kT0 + 4 * kMs);
  EXPECT_EQ(s().events[e1].completed, 1u);
  EXPECT_EQ(s().events[e1].time_ns, kT0 + 3 * kMs);
  EXPECT_EQ(s().events[e2].completed, 0u);
  advance_all(s(), kT0 + 10 * kMs);
  EXPECT_EQ(s().events[e2].time_ns, kT0 + 5 * kMs);
}

constexpr Lane kLegacy{0, LaneOrder::legacy};
constexpr Lane kBlocking1{1, LaneOrder::blocking};
constexpr Lane kBlocking2{2, LaneOrder::blocking};
constexpr Lane kNonBlocking{3, LaneOrder::non_blocking};

// Streams run side by side: an event recorded on an idle stream completes
// while another stream's kernel still runs (one context's FIFO would hold it
// back, hiding code that records on one stream to cover another's work).
TEST_F(EngineTest, AnIdleStreamsEventDoesNotWaitForAnotherStream) {
  int32_t a = context(0);
  int32_t e = event(0);
  const uint64_t long_kernel = kernel(a, 10 * kMs, kT0, kBlocking1);
  const uint64_t record = marker(a, e, 1, kT0, kBlocking2);
  advance_all(s(), kT0 + kMs);
  EXPECT_EQ(s().events[e].completed, 1u);
  EXPECT_EQ(s().events[e].time_ns, kT0);
  EXPECT_TRUE(lane_done_through(s(), a, kBlocking2.id, record));
  EXPECT_FALSE(lane_done_through(s(), a, kBlocking1.id, long_kernel));
  EXPECT_FALSE(context_done_through(s(), a, record));
  advance_all(s(), kT0 + 20 * kMs);
  EXPECT_TRUE(context_done_through(s(), a, record));
  EXPECT_EQ(s().contexts[a].last_done_ns, kT0 + 10 * kMs);
}

// Kernels of two streams share the engine: each runs at half speed while
// both run, and the device is busy for the sum of their durations.
TEST_F(EngineTest, KernelsOfTwoStreamsShareTheEngine) {
  int32_t a = context(0);
  int32_t first = event(0), second = event(0), third = event(0);
  kernel(a, 2 * kMs, kT0, kBlocking1);
  marker(a, first, 1, kT0, kBlocking1);
  kernel(a, 3 * kMs, kT0, kBlocking2);
  marker(a, second, 1, kT0, kBlocking2);
  kernel(a, 1 * kMs, kT0, kBlocking1);
  marker(a, third, 1, kT0, kBlocking1);
  advance_all(s(), kT0 + 20 * kMs);
  EXPECT_EQ(s().events[first].time_ns, kT0 + 4 * kMs);
  EXPECT_EQ(s().events[second].time_ns, kT0 + 6 * kMs);
  EXPECT_EQ(s().events[third].time_ns, kT0 + 6 * kMs);
  EXPECT_EQ(s().devices[0].busy_ns, 6 * kMs);
  EXPECT_EQ(s().procs[0].busy[0], 6 * kMs);
}

// A short kernel beside a long one on another stream ends long before it:
// a record after the short one must not be taken to cover the long one.
TEST_F(EngineTest, AShortKernelBesideALongOneOnAnotherStreamEndsFirst) {
  int32_t a = context(0);
  int32_t after_short = event(0), after_long = event(0);
  kernel(a, 100 * kMs, kT0, kBlocking1);
  marker(a, after_long, 1, kT0, kBlocking1);
  kernel(a, kMs, kT0, kBlocking2);
  marker(a, after_short, 1, kT0, kBlocking2);
  advance_all(s(), kT0 + 3 * kMs);
  EXPECT_EQ(s().events[after_short].time_ns, kT0 + 2 * kMs);
  EXPECT_EQ(s().events[after_long].completed, 0u);
  advance_all(s(), kT0 + 200 * kMs);
  EXPECT_EQ(s().events[after_long].time_ns, kT0 + 101 * kMs);
}

// At most kConcurrentStreams kernels run at once; the next waits for one to end.
TEST_F(EngineTest, AtMostTheHardwareQueuesRunSideBySide) {
  int32_t a = context(0);
  std::vector<int32_t> done;
  for (uint64_t i = 0; i <= kConcurrentStreams; ++i) {
    kernel(a, kMs, kT0, Lane{10 + i, LaneOrder::non_blocking});
    done.push_back(event(0));
    marker(a, done.back(), 1, kT0, Lane{10 + i, LaneOrder::non_blocking});
  }
  advance_all(s(), kT0 + 20 * kMs);
  for (uint32_t i = 0; i < kConcurrentStreams; ++i)
    EXPECT_EQ(s().events[done[i]].time_ns, kT0 + kConcurrentStreams * kMs);
  EXPECT_EQ(s().events[done.back()].time_ns, kT0 + (kConcurrentStreams + 1) * kMs);
}

TEST_F(EngineTest, AWaitBlocksOnlyItsOwnStream) {
  int32_t a = context(0);
  int32_t never = event(0), done = event(0);
  enqueue(s(), a, ItemKind::wait_event, 0, never, 1, kQueueCap, kT0, kBlocking1);
  const uint64_t blocked = kernel(a, kMs, kT0, kBlocking1);
  kernel(a, kMs, kT0, kBlocking2);
  marker(a, done, 1, kT0, kBlocking2);
  advance_all(s(), kT0 + 10 * kMs);
  EXPECT_EQ(s().events[done].time_ns, kT0 + kMs);
  EXPECT_FALSE(lane_done_through(s(), a, kBlocking1.id, blocked));
  EXPECT_EQ(s().contexts[a].count, 2u);
}

// "When an action is taken in the legacy stream ..., the legacy stream first
// waits on all blocking streams, the action is queued in the legacy stream,
// and then all blocking streams wait on the legacy stream"; non-blocking
// streams are left out of both.
TEST_F(EngineTest, TheLegacyStreamWaitsForEarlierBlockingWork) {
  int32_t a = context(0);
  int32_t on_legacy = event(0), on_non_blocking = event(0);
  kernel(a, 5 * kMs, kT0, kBlocking1);
  kernel(a, 7 * kMs, kT0, kNonBlocking);
  marker(a, on_legacy, 1, kT0, kLegacy);
  marker(a, on_non_blocking, 1, kT0, kNonBlocking);
  advance_all(s(), kT0 + 20 * kMs);
  EXPECT_EQ(s().events[on_legacy].time_ns, kT0 + 10 * kMs);  // both at half speed meanwhile
  EXPECT_EQ(s().events[on_non_blocking].time_ns, kT0 + 12 * kMs);
}

TEST_F(EngineTest, BlockingStreamsWaitForEarlierLegacyWork) {
  int32_t a = context(0);
  int32_t on_blocking = event(0), on_non_blocking = event(0);
  kernel(a, 5 * kMs, kT0, kLegacy);
  marker(a, on_blocking, 1, kT0, kBlocking1);
  marker(a, on_non_blocking, 1, kT0, kNonBlocking);
  advance_all(s(), kT0 + 20 * kMs);
  EXPECT_EQ(s().events[on_blocking].time_ns, kT0 + 5 * kMs);
  EXPECT_EQ(s().events[on_non_blocking].time_ns, kT0);
}

// A wait holds the record made before it, whatever the event records next:
// a later record on an idle stream completes first and must not let it go.
TEST_F(EngineTest, AWaitIsNotLetGoByALaterRecordOfItsEvent) {
  int32_t a = context(0);
  int32_t e = event(0), after_wait = event(0);
  kernel(a, 10 * kMs, kT0, kBlocking1);
  marker(a, e, 1, kT0, kBlocking1);
  enqueue(s(), a, ItemKind::wait_event, 0, e, 1, kQueueCap, kT0, kNonBlocking);
  marker(a, after_wait, 1, kT0, kNonBlocking);
  marker(a, e, 2, kT0, kBlocking2);  // the event is recorded again, on an idle stream
  advance_all(s(), kT0 + kMs);
  EXPECT_TRUE(record_completed(s().events[e], 2));
  EXPECT_FALSE(record_completed(s().events[e], 1));
  EXPECT_EQ(s().events[after_wait].completed, 0u);
  advance_all(s(), kT0 + 20 * kMs);
  EXPECT_EQ(s().events[after_wait].time_ns, kT0 + 10 * kMs);
  EXPECT_TRUE(record_completed(s().events[e], 1));
}

// More records of one event queued at once than are kept apart: the oldest,
// no longer kept, counts as completed once a later one did (a wait on it is
// let go early, never held for good).
TEST_F(EngineTest, ARecordNoLongerKeptCompletesWithALaterOne) {
  int32_t a = context(0);
  int32_t e = event(0);
  kernel(a, 100 * kMs, kT0, kBlocking1);
  marker(a, e, 1, kT0, kBlocking1);
  for (uint64_t t = 2; t <= kEventPendingRecords + 1; ++t) {  // one more than kept
    kernel(a, kMs / 10, kT0, kBlocking2);
    marker(a, e, t, kT0, kBlocking2);
  }
  advance_all(s(), kT0 + kMs / 20);
  EXPECT_FALSE(record_completed(s().events[e], 2));
  advance_all(s(), kT0 + 40 * kMs);  // the short kernels ran at half speed beside the long one
  EXPECT_TRUE(record_completed(s().events[e], kEventPendingRecords + 1));
  EXPECT_TRUE(record_completed(s().events[e], 1));  // no longer kept
}

TEST_F(EngineTest, WaitEventBlocksAnotherContext) {
  int32_t a = context(0), b = context(1);
  int32_t e = event(0);
  kernel(a, 5 * kMs);
  enqueue(s(), a, ItemKind::marker, 0, e, 1, kQueueCap, kT0);
  enqueue(s(), b, ItemKind::wait_event, 0, e, 1, kQueueCap, kT0);
  kernel(b, 1 * kMs);
  advance_all(s(), kT0 + 20 * kMs);
  // B could not run before A's marker, and A was alone on the engine meanwhile.
  EXPECT_EQ(s().contexts[a].last_done_ns, kT0 + 5 * kMs);
  EXPECT_EQ(s().contexts[b].last_done_ns, kT0 + 6 * kMs);
}

// "If hEvent has been recorded but has not yet been completed ..., the
// resources associated with hEvent will be released automatically once the
// device has completed hEvent": the slot is not handed out before, and its
// next owner's records are numbered past the last one queued.
TEST_F(EngineTest, ADestroyedEventsSlotWaitsForItsQueuedRecord) {
  int32_t a = context(0), b = context(1);
  int32_t gone = event(0);
  kernel(a, 5 * kMs);
  marker(a, gone, 1);
  enqueue(s(), b, ItemKind::wait_event, 0, gone, 1, kQueueCap, kT0);
  kernel(b, 1 * kMs);
  destroy_event(s(), gone);
  EXPECT_EQ(s().events[gone].state, SlotState::dying);
  EXPECT_NE(event(0), gone);  // not reused while its record is queued
  advance_all(s(), kT0 + 20 * kMs);
  EXPECT_EQ(s().events[gone].state, SlotState::free);
  // The wait queued on it still waited for the record.
  EXPECT_EQ(s().contexts[b].last_done_ns, kT0 + 6 * kMs);
  uint64_t first = 0;
  int32_t reused = -1;
  while (reused != gone) reused = event(0, &first);
  EXPECT_EQ(first, 1u);
  EXPECT_EQ(s().events[gone].completed, 1u);  // nothing of the old owner's left to complete
}

TEST_F(EngineTest, RecordsQueuedInAContextThatGoesCompleteWithIt) {
  int32_t a = context(0), b = context(1);
  int32_t live = event(0), gone = event(0);
  kernel(a, 50 * kMs);
  marker(a, live, 1);
  marker(a, gone, 1);
  enqueue(s(), b, ItemKind::wait_event, 0, live, 1, kQueueCap, kT0);
  kernel(b, 1 * kMs);
  destroy_event(s(), gone);
  EXPECT_EQ(s().events[gone].state, SlotState::dying);
  destroy_context(s(), a, kT0 + 2 * kMs);
  EXPECT_EQ(s().events[gone].state, SlotState::free);
  EXPECT_EQ(s().events[live].completed, 1u);  // nothing left to wait for: the waiter goes on
  advance_all(s(), kT0 + 20 * kMs);
  EXPECT_EQ(s().contexts[b].count, 0u);
}

TEST_F(EngineTest, QueueDepthBoundsPendingWork) {
  int32_t a = context(0);
  for (int i = 0; i < 8; ++i) EXPECT_NE(enqueue(s(), a, ItemKind::kernel, kMs, -1, 0, 8, kT0), 0u);
  EXPECT_EQ(enqueue(s(), a, ItemKind::kernel, kMs, -1, 0, 8, kT0), 0u);
  EXPECT_NE(enqueue(s(), a, ItemKind::kernel, kMs, -1, 0, 8, kT0 + kMs), 0u);  // one completed
}

TEST_F(EngineTest, WaitHintIsALowerBound) {
  int32_t a = context(0), b = context(1);
  for (int i = 0; i < 4; ++i) kernel(a, kMs);
  uint64_t last = 0;
  for (int i = 0; i < 4; ++i) last = kernel(b, kMs);
  const uint64_t hint = wait_hint_ns(s(), b, last, kT0);
  advance_all(s(), kT0 + 100 * kMs);
  EXPECT_LE(kT0 + hint, s().contexts[b].last_done_ns);
  EXPECT_GE(hint, 4 * kMs);
}

// A launch into a full queue sleeps until about half of it has drained. With
// a long kernel at the head and the rest on another stream, that stream's
// half drains long before the long kernel ends: a wake dated by all the work
// ahead (the long kernel's second included) let the stream run dry for the
// rest of the sleep.
TEST_F(EngineTest, AFullQueuesDrainHintIsALowerBoundBesideALongKernel) {
  int32_t a = context(0);
  constexpr uint32_t kDepth = 64;
  EXPECT_NE(enqueue(s(), a, ItemKind::kernel, 1000 * kMs, -1, 0, kDepth, kT0, kBlocking1), 0u);
  while (enqueue(s(), a, ItemKind::kernel, kMs / 10, -1, 0, kDepth, kT0, kNonBlocking) != 0) {
  }
  ASSERT_EQ(s().contexts[a].count, kDepth);
  const uint64_t hint = drain_hint_ns(s(), a, kT0);
  // Beside the long kernel each 100 µs kernel takes 200 µs: the first half
  // of the stream (the middle item included) is done after 32 of them.
  advance_all(s(), kT0 + hint);
  EXPECT_GT(s().contexts[a].count, kDepth / 2) << "the hint is past the middle item's end";
  advance_all(s(), kT0 + 32 * kMs / 5);
  EXPECT_LE(s().contexts[a].count, kDepth / 2);
  EXPECT_LT(hint, 10 * kMs);
  const uint64_t empty = drain_hint_ns(s(), context(1), kT0);
  EXPECT_EQ(empty, 0u);
}

// The same with one short kernel of the long kernel's stream in the middle of
// the queue: the middle item ends after the long kernel, but the launching
// stream (the short kernels') runs dry within 12.4 ms, and the launch looks
// again by then.
TEST_F(EngineTest, AFullQueuesDrainHintKeepsTheLaunchingStreamFed) {
  int32_t a = context(0);
  constexpr uint32_t kDepth = 64;
  EXPECT_NE(enqueue(s(), a, ItemKind::kernel, 1000 * kMs, -1, 0, kDepth, kT0, kBlocking1), 0u);
  for (int i = 0; i < 31; ++i) kernel(a, kMs / 10, kT0, kNonBlocking);
  kernel(a, kMs / 10, kT0, kBlocking1);
  for (int i = 0; i < 31; ++i) kernel(a, kMs / 10, kT0, kNonBlocking);
  ASSERT_EQ(s().contexts[a].count, kDepth);
  EXPECT_GT(drain_hint_ns(s(), a, kT0), 1000 * kMs);  // the middle item: behind the long one
  const uint64_t hint = drain_hint_ns(s(), a, kT0, &kNonBlocking.id);
  EXPECT_LE(hint, 62 * kMs / 10);  // the stream's own work, a lower bound of its 12.4 ms
  advance_all(s(), kT0 + hint);
  EXPECT_GT(s().contexts[a].count, 2u) << "the stream ran dry before the hint";
}

// A wait's part of the hint is what its record still waits for: nothing once
// that completed, its stream's work where it is in the same context (a
// joined batch's wait is not slept on for a made-up floor).
TEST_F(EngineTest, AWaitsHintIsItsRecordsWork) {
  int32_t a = context(0);
  int32_t done = event(0), behind = event(0), after = event(0);
  marker(a, done, 1, kT0, kBlocking1);
  advance_all(s(), kT0 + 1);
  const uint64_t w1 =
      enqueue(s(), a, ItemKind::wait_event, 0, done, 1, kQueueCap, kT0 + 1, kNonBlocking);
  EXPECT_EQ(wait_hint_ns(s(), a, w1, kT0 + 1, &kNonBlocking.id), 0u);
  kernel(a, 5 * kMs, kT0 + 1, kBlocking1);
  marker(a, behind, 1, kT0 + 1, kBlocking1);
  enqueue(s(), a, ItemKind::wait_event, 0, behind, 1, kQueueCap, kT0 + 1, kBlocking2);
  const uint64_t last = marker(a, after, 1, kT0 + 1, kBlocking2);
  EXPECT_EQ(wait_hint_ns(s(), a, last, kT0 + 1, &kBlocking2.id), 5 * kMs);
}

TEST_F(EngineTest, MemoryIsChargedAgainstCapacity) {
  const uint64_t total = s().devices[1].total_mem;
  EXPECT_TRUE(charge(s(), 0, 1, total / 2));
  EXPECT_FALSE(charge(s(), 1, 1, total / 2 + 1));
  EXPECT_TRUE(charge(s(), 1, 1, total / 2));
  EXPECT_EQ(s().devices[1].used_mem, total);
  uncharge(s(), 0, 1, total / 2);
  EXPECT_EQ(s().devices[1].used_mem, total / 2);
}

TEST_F(EngineTest, ContextCreationFailsWhenOverheadDoesNotFit) {
  bool oom = false;
  ASSERT_TRUE(charge(s(), 0, 1, s().devices[1].total_mem - (100ull << 20)));
  EXPECT_EQ(create_context(s(), 1, 1, 300ull << 20, kT0, &oom), -1);
  EXPECT_TRUE(oom);
}

TEST_F(EngineTest, ReleasingAProcessFreesItsContextsMemoryAndQueuedWork) {
  int32_t a = context(0), b = context(1);
  ASSERT_TRUE(charge(s(), 0, 0, 1ull << 30));
  kernel(a, 100 * kMs);
  kernel(b, 1 * kMs);
  advance_all(s(), kT0 + kMs);
  release_process(s(), 0, kT0 + kMs);
  EXPECT_EQ(s().procs[0].state, SlotState::exited);
  EXPECT_EQ(s().procs[0].mem[0], 0u);
  EXPECT_EQ(s().devices[0].used_mem, 300ull << 20);  // only B's context remains
  EXPECT_EQ(s().contexts[a].state, SlotState::free);
  advance_all(s(), kT0 + 10 * kMs);
  EXPECT_EQ(s().contexts[b].last_done_ns, kT0 + 2 * kMs);  // B no longer waits for A
  EXPECT_EQ(s().procs[0].busy[0], kMs);                    // busy time of the dead process is kept
}

TEST_F(EngineTest, SharedMemoryOutlivesItsCreatorAndIsChargedOnce) {
  const uint64_t bytes = 512ull << 20;
  ASSERT_TRUE(charge(s(), 0, 0, bytes));
  const int32_t slot = publish_shared(s(), 0, 0, bytes, 1, 7, 9);
  ASSERT_EQ(find_shared(s(), 7, 9), slot);
  ASSERT_TRUE(hold_shared(s(), slot, 1));
  ASSERT_TRUE(hold_shared(s(), slot, 1));  // one hold per process
  EXPECT_EQ(s().devices[0].used_mem, bytes);
  release_process(s(), 0, kT0);  // the creator dies: the importer keeps the memory
  EXPECT_EQ(s().devices[0].used_mem, bytes);
  EXPECT_EQ(s().procs[1].mem[0], bytes);
  drop_shared(s(), slot, 1);
  EXPECT_EQ(s().devices[0].used_mem, 0u);
  EXPECT_EQ(find_shared(s(), 7, 9), -1);
}

TEST_F(EngineTest, BusyHistoryGivesUtilisationWindows) {
  int32_t a = context(0);
  kernel(a, 500 * kMs, kT0 + 500 * kMs);
  advance_all(s(), kT0 + 1500 * kMs);
  uint64_t busy = 0, span = 0;
  EXPECT_TRUE(device_busy_since(s(), 0, kT0 + 500 * kMs, kT0 + 1500 * kMs, &busy, &span));
  EXPECT_EQ(busy, 500 * kMs);
  EXPECT_EQ(span, 1000 * kMs);
  EXPECT_TRUE(process_busy_since(s(), 0, 0, kT0 + 1000 * kMs, kT0 + 1500 * kMs, &busy, &span));
  EXPECT_EQ(busy, 0u);
  EXPECT_TRUE(process_busy_since(s(), 0, 0, kT0 + 700 * kMs, kT0 + 1500 * kMs, &busy, &span));
  EXPECT_EQ(busy, 300 * kMs);
}

}  // namespace
}  // namespace fakegpu

namespace fakegpu {
namespace {

TEST(Config, QuantitiesParseLikeKubernetes) {
  EXPECT_EQ(parse_quantity("80Gi"), 80ull << 30);
  EXPECT_EQ(parse_quantity("300Mi"), 300ull << 20);
  EXPECT_EQ(parse_quantity("1.5Gi"), 3ull << 29);
  EXPECT_EQ(parse_quantity("16G"), 16'000'000'000ull);
  EXPECT_EQ(parse_quantity("4096"), 4096u);
  EXPECT_EQ(parse_quantity("0"), 0u);
  for (const char* bad :
       {"", "Gi", "1.5", "-1", "10m", "1e3", "1GB", "1..5Gi", ".5Gi", "99999999Ei"}) {
    EXPECT_FALSE(parse_quantity(bad).has_value()) << bad;
  }
}

TEST(Config, DevicesAndKnobsAreValidated) {
  auto env = [](std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  ConfigResult ok = load_config(env({{"FAKEGPU_DEVICES", "H100-80GB:80Gi:132;T4:16Gi:40:7.5"},
                                     {"FAKEGPU_TIMESLICE_US", "500"},
                                     {"FAKEGPU_CONTEXT_OVERHEAD", "256Mi"}}));
  ASSERT_TRUE(ok.config.has_value()) << ok.error;
  ASSERT_EQ(ok.config->devices.size(), 2u);
  EXPECT_EQ(ok.config->devices[1].memory, 16ull << 30);
  EXPECT_EQ(ok.config->devices[1].cc_major, 7);
  EXPECT_EQ(ok.config->devices[0].cc_major, 9);
  EXPECT_EQ(ok.config->timeslice_ns, 500'000u);
  EXPECT_EQ(ok.config->context_overhead, 256ull << 20);
  ConfigResult defaults = load_config(env({}));
  ASSERT_TRUE(defaults.config.has_value());
  EXPECT_EQ(defaults.config->devices[0].name, "H100-80GB");
  EXPECT_EQ(defaults.config->timeslice_ns, 2'000'000u);
  EXPECT_EQ(defaults.config->kernel_ns, 10'000u);
  EXPECT_EQ(defaults.config->driver_version, 13000);
  EXPECT_FALSE(defaults.config->abort_on_freed_handle);
  ConfigResult strict = load_config(env({{"FAKEGPU_FREED_HANDLES", "abort"}}));
  ASSERT_TRUE(strict.config.has_value()) << strict.error;
  EXPECT_TRUE(strict.config->abort_on_freed_handle);
  for (auto [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"FAKEGPU_DEVICES", "H100;T4"},
           {"FAKEGPU_DEVICES",
            "a:1Gi:1;b:1Gi:1;c:1Gi:1;d:1Gi:1;e:1Gi:1;f:1Gi:1;g:1Gi:1;h:1Gi:1;i:1Gi:1"},
           {"FAKEGPU_DEVICES", "X:1Gi:4:9"},
           {"FAKEGPU_KERNEL_NS", "1us"},
           {"FAKEGPU_DRIVER_VERSION", "9000"},
           {"FAKEGPU_TIMESLICE_US", "20000000"},
           {"FAKEGPU_QUEUE_DEPTH", "0"},
           {"FAKEGPU_FREED_HANDLES", "crash"}}) {
    ConfigResult bad = load_config(env({{name, value}}));
    EXPECT_FALSE(bad.config.has_value()) << name << "=" << value;
    EXPECT_NE(bad.error.find(name), std::string::npos) << bad.error;
  }
}

}  // namespace
}  // namespace fakegpu
