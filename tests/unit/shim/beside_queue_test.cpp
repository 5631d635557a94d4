// What the streams have queued beside a batch of other streams
// (shim/gate/beside_queue.hpp), with the driver's queries faked.
#include "shim/gate/beside_queue.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "shim/gate/batch_streams.hpp"

namespace cushare::shim::gate {
namespace {

CUstream stream(std::uintptr_t n) {
  return reinterpret_cast<CUstream>(0x1000 + 16 * n);
}

CUevent event(std::uintptr_t n) {
  return reinterpret_cast<CUevent>(0x9000 + 16 * n);
}

struct FakeBatch {
  std::uint64_t launches = 0;
  CUstream stream = nullptr;
  bool seen_done = false;
  std::uint64_t done_seen_ns = 0;
  std::uint64_t first_submit_ns = 0;
  bool several_streams = false;
  CUevent event = nullptr;
  bool complete = false;  // what the driver would answer
  int queries = 0;
};

constexpr std::uint64_t kUs = 1'000;
constexpr std::uint64_t kNow = 1'000'000 * kUs;

struct Scan {
  BesideQueue q;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> samples;  // (launches, span)
};

// The oldest batch is joined over several streams unless `oldest` says.
Scan scan(std::vector<FakeBatch>& later, CUstream s, std::uint64_t now = kNow,
          CUstream oldest = BatchStreams::none()) {
  Scan out;
  out.q = beside_queue(
      later.begin(), later.end(), oldest, s, now,
      [](FakeBatch& b) {
        ++b.queries;
        return b.complete;
      },
      [&](const FakeBatch& b, std::uint64_t previous_ns) {
        out.samples.emplace_back(b.launches,
                                 b.done_seen_ns - std::max(b.first_submit_ns, previous_ns));
      });
  return out;
}

// Counts the driver calls `looks_beside` makes to tell a non-blocking stream.
struct FlagsQuery {
  bool non_blocking = false;
  int calls = 0;
  bool operator()() {
    ++calls;
    return non_blocking;
  }
};

// The launch's stream as its records go: the legacy stream by either
// handle as nullptr, a per-thread one that one thread alone launches on as
// itself (as if `alone`), else as the legacy stream.
CUstream own_of(CUstream launch, bool alone = true) {
  if (launch == CU_STREAM_LEGACY) return nullptr;
  if (launch == CU_STREAM_PER_THREAD && !alone) return nullptr;
  return launch;
}

bool looks(CUstream oldest, bool oldest_non_blocking, CUstream launch, FlagsQuery& flags,
           bool alone = true) {
  return looks_beside(false, oldest, oldest_non_blocking, launch, own_of(launch, alone),
                      std::ref(flags));
}

TEST(LooksBeside, BehindABatchOverSeveralStreamsEveryStreamLooks) {
  FlagsQuery flags;
  EXPECT_TRUE(
      looks_beside(true, BatchStreams::none(), false, stream(1), stream(1), std::ref(flags)));
  EXPECT_TRUE(looks_beside(true, BatchStreams::none(), false, nullptr, nullptr, std::ref(flags)));
  EXPECT_EQ(flags.calls, 0);
}

TEST(LooksBeside, BehindAnotherStreamsBatchAloneTheLaunchLooks) {
  // The long kernel's batch recorded on its stream alone (the poller's
  // record of a tail of one launch): a launch on a stream the driver runs
  // beside it looks.
  FlagsQuery flags;
  EXPECT_TRUE(looks(stream(1), false, stream(2), flags));  // blocking beside blocking
  EXPECT_TRUE(looks(stream(1), true, stream(2), flags));
  EXPECT_TRUE(looks(CU_STREAM_PER_THREAD, false, stream(2), flags));
  EXPECT_TRUE(looks(stream(1), false, CU_STREAM_PER_THREAD, flags));
  EXPECT_TRUE(looks(stream(1), true, nullptr, flags));  // legacy beside non-blocking
  EXPECT_TRUE(looks(stream(1), true, CU_STREAM_LEGACY, flags));
  EXPECT_EQ(flags.calls, 0);
}

TEST(LooksBeside, ALaunchOnTheOldestBatchsOwnStreamWaitsForIt) {
  FlagsQuery flags{.non_blocking = true};
  EXPECT_FALSE(looks(stream(1), true, stream(1), flags));
  EXPECT_FALSE(looks(nullptr, false, nullptr, flags));
  EXPECT_FALSE(looks(nullptr, false, CU_STREAM_LEGACY, flags));
  EXPECT_FALSE(looks(CU_STREAM_PER_THREAD, false, CU_STREAM_PER_THREAD, flags));
  // A per-thread stream another thread launched on too: its records go on
  // the legacy stream, and the batch may be its own from before.
  EXPECT_FALSE(looks(CU_STREAM_PER_THREAD, false, CU_STREAM_PER_THREAD, flags, false));
  EXPECT_EQ(flags.calls, 0);
}

TEST(LooksBeside, TheLegacyStreamWaitsForABlockingStreamsBatch) {
  // It runs after every blocking stream's earlier work, a per-thread
  // stream's too: it would only look again and again until the batch ends.
  FlagsQuery flags;
  EXPECT_FALSE(looks(stream(1), false, nullptr, flags));
  EXPECT_FALSE(looks(CU_STREAM_PER_THREAD, false, CU_STREAM_LEGACY, flags));
  EXPECT_EQ(flags.calls, 0);
}

TEST(LooksBeside, BehindTheLegacyStreamsBatchOnlyANonBlockingStreamLooks) {
  // A blocking stream (and a per-thread one) runs after the legacy
  // stream's earlier work: it waits for the batch, as the driver does.
  FlagsQuery blocking{.non_blocking = false};
  EXPECT_FALSE(looks(nullptr, false, stream(2), blocking));
  EXPECT_FALSE(looks(nullptr, false, CU_STREAM_PER_THREAD, blocking));
  EXPECT_EQ(blocking.calls, 2);
  FlagsQuery non_blocking{.non_blocking = true};
  EXPECT_TRUE(looks(nullptr, false, stream(2), non_blocking));
  EXPECT_EQ(non_blocking.calls, 1);
}

TEST(BesideQueue, NothingOfTheStreamBehindTheOldestBatchSaysNothingOfIt) {
  std::vector<FakeBatch> later;
  BesideQueue q = scan(later, stream(1)).q;
  EXPECT_EQ(q.pending, 0u);
  EXPECT_FALSE(q.stream_caught_up);  // its launches in the oldest batch may still run
  EXPECT_FALSE(q.stream_recorded);   // and nothing will tell: the caller records a mark
  EXPECT_FALSE(beside_allows(q, 100 * kUs, 2'000 * kUs));
  later.push_back({.launches = 3, .stream = BatchStreams::none(), .complete = true});
  later.push_back({.launches = 2, .stream = stream(2), .complete = true});
  q = scan(later, stream(1)).q;
  EXPECT_FALSE(q.stream_caught_up);  // joined, or another stream's: nothing of its own
  EXPECT_FALSE(q.stream_recorded);
  later.push_back({.launches = 0, .stream = stream(1), .complete = false});  // the mark
  q = scan(later, stream(1)).q;
  EXPECT_FALSE(q.stream_caught_up);
  EXPECT_TRUE(q.stream_recorded);
  later.back().complete = true;  // the stream caught up
  EXPECT_TRUE(scan(later, stream(1)).q.stream_caught_up);
}

TEST(BesideQueue, TheStreamsOwnBatchesCompleteInOrder) {
  std::vector<FakeBatch> later{{.launches = 2, .stream = stream(1), .complete = true},
                               {.launches = 3, .stream = stream(1), .complete = false},
                               {.launches = 4, .stream = stream(1), .complete = true}};
  const BesideQueue q = scan(later, stream(1)).q;
  EXPECT_TRUE(q.stream_caught_up);
  EXPECT_EQ(q.pending, 7u);  // the two behind the first that has not completed
  EXPECT_EQ(q.beside_total, 7u);
  EXPECT_TRUE(later[0].seen_done);
  EXPECT_EQ(later[0].done_seen_ns, kNow);
  EXPECT_FALSE(later[1].seen_done);
  // Behind one of its own that has not completed, none is asked.
  EXPECT_EQ(later[2].queries, 0);
  EXPECT_FALSE(later[2].seen_done);
}

TEST(BesideQueue, NoneOfTheOldestBatchsStreamIsAskedWhileItRuns) {
  // The oldest batch, on stream 1 alone, is not known done: a later batch
  // of stream 1 completes after it, and found done between the two it
  // would sample the long kernel's run as its own launches'.
  std::vector<FakeBatch> later{{.launches = 4, .stream = stream(1), .complete = true},
                               {.launches = 2, .stream = stream(2), .complete = true}};
  const Scan s = scan(later, stream(2), kNow, stream(1));
  EXPECT_EQ(later[0].queries, 0);
  EXPECT_FALSE(later[0].seen_done);
  EXPECT_TRUE(s.q.stream_caught_up);
  EXPECT_EQ(s.samples.size(), 1u);  // stream 2's only
  EXPECT_EQ(s.q.pending, 0u);
  // Joined over several streams, the oldest batch says nothing of one.
  std::vector<FakeBatch> again{{.launches = 4, .stream = stream(1), .complete = true}};
  scan(again, stream(2));
  EXPECT_EQ(again[0].queries, 1);
}

TEST(BesideQueue, ABatchSeenDoneIsNotAskedAgain) {
  std::vector<FakeBatch> later{{.launches = 2, .stream = stream(1), .complete = true}};
  scan(later, stream(1));
  scan(later, stream(1), kNow + kUs);
  EXPECT_EQ(later[0].queries, 1);
  EXPECT_EQ(later[0].done_seen_ns, kNow);  // when it was first seen done
  EXPECT_TRUE(scan(later, stream(1)).q.stream_caught_up);
}

TEST(BesideQueue, OtherStreamsPendingLaunchesBehindItsLatestDoneCountAsItsOwn) {
  // A batch recorded on one stream, or joined over several (the one that
  // waits for a long kernel among them), may hold launches of this stream
  // too: those before a completed record on it alone have run; those behind
  // it are counted, so the stream's queue is never undercounted.
  std::vector<FakeBatch> later{
      {.launches = 98, .stream = BatchStreams::none(), .complete = false},  // joined
      {.launches = 5, .stream = stream(2), .complete = false},
      {.launches = 1, .stream = stream(1), .complete = true},
      {.launches = 6, .stream = BatchStreams::none(), .complete = false},
      {.launches = 7, .stream = stream(3), .complete = true},
      {.launches = 1, .stream = stream(1), .complete = false}};
  const BesideQueue q = scan(later, stream(1)).q;
  EXPECT_TRUE(q.stream_caught_up);
  EXPECT_EQ(q.pending, 6u + 1u);
  EXPECT_TRUE(later[4].seen_done);
  EXPECT_EQ(later[0].queries, 1);  // another stream's batches are each asked
}

TEST(BesideQueue, OneAllowanceForEveryStreamGoingBeside) {
  // Streams 1 and 2 both caught up, each with 10 launches queued behind:
  // together they hold 20, which a 1.5 ms allowance at 100 us cannot take,
  // though each alone would fit. Stream 3's launches (stuck behind the
  // long kernel: not caught up) and the joined batches (such as the one
  // waiting for the long kernel) are not theirs.
  std::vector<FakeBatch> later{{.launches = 4, .stream = stream(3), .complete = false},
                               {.launches = 9, .stream = BatchStreams::none(), .complete = false},
                               {.launches = 1, .stream = stream(1), .complete = true},
                               {.launches = 2, .stream = BatchStreams::none(), .complete = false},
                               {.launches = 1, .stream = stream(2), .complete = true},
                               {.launches = 10, .stream = stream(1), .complete = false},
                               {.launches = 10, .stream = stream(2), .complete = false}};
  const BesideQueue q = scan(later, stream(2)).q;
  EXPECT_EQ(q.beside_total, 20u);
  EXPECT_EQ(q.pending, 20u);  // behind stream 2's latest done: stream 1's too
  EXPECT_FALSE(beside_allows(q, 100 * kUs, 1'500 * kUs));
  EXPECT_TRUE(beside_allows(q, 100 * kUs, 2'100 * kUs));
  const BesideQueue q1 = scan(later, stream(1)).q;
  EXPECT_EQ(q1.pending, 22u);  // the joined one behind its latest done too
  EXPECT_EQ(q1.beside_total, 20u);
}

TEST(BesideQueue, MoreStreamsThanItKeepsTrackOfLetNothingGoBeside) {
  std::vector<FakeBatch> later;
  later.reserve(kBesideStreams + 1);
  for (std::uintptr_t i = 0; i <= kBesideStreams; ++i)
    later.push_back({.launches = 1, .stream = stream(i), .complete = true});
  const BesideQueue q = scan(later, stream(0)).q;
  EXPECT_TRUE(q.stream_caught_up);
  EXPECT_TRUE(q.too_many_streams);
  EXPECT_FALSE(beside_allows(q, 100 * kUs, 2'000 * kUs));
}

TEST(BesideQueue, ABatchFoundDoneGivesItsSampleFromItsOwnStart) {
  // From its first submission, or the previous batch of its stream seen done.
  std::vector<FakeBatch> later{
      {.launches = 4, .stream = stream(1), .first_submit_ns = kNow - 900 * kUs, .complete = true}};
  Scan s = scan(later, stream(1));
  ASSERT_EQ(s.samples.size(), 1u);
  EXPECT_EQ(s.samples[0], std::make_pair(std::uint64_t{4}, 900 * kUs));
  later.push_back(
      {.launches = 2, .stream = stream(1), .first_submit_ns = kNow - 500 * kUs, .complete = true});
  later.push_back({.launches = 0, .stream = stream(2), .complete = true});  // a mark: no sample
  later.push_back({.launches = 3, .stream = BatchStreams::none(), .complete = true});  // joined
  s = scan(later, stream(1), kNow + 300 * kUs);
  ASSERT_EQ(s.samples.size(), 1u);  // the first was given already
  EXPECT_EQ(s.samples[0], std::make_pair(std::uint64_t{2}, 300 * kUs));  // from kNow
}

TEST(BesideQueue, ALaunchGoesWhileTheStreamsQueueWithItFitsTheAllowance) {
  const BesideQueue caught_up{.pending = 0, .stream_caught_up = true};
  EXPECT_TRUE(beside_allows(caught_up, 100 * kUs, 100 * kUs));  // one launch: itself
  EXPECT_FALSE(beside_allows(caught_up, 100 * kUs, 0));         // no room in the lease
  EXPECT_FALSE(beside_allows(caught_up, 100 * kUs, 99 * kUs));
  BesideQueue q{.pending = 19, .stream_caught_up = true};
  EXPECT_TRUE(beside_allows(q, 100 * kUs, 2'000 * kUs));  // 20 of 100 us: 2 ms
  q.pending = 20;
  EXPECT_FALSE(beside_allows(q, 100 * kUs, 2'000 * kUs));
  q.pending = 0;
  q.beside_total = 20;  // the other streams' share of it
  EXPECT_FALSE(beside_allows(q, 100 * kUs, 2'000 * kUs));
  // Without a per-launch figure nothing prices the queue: not even one.
  EXPECT_FALSE(beside_allows(caught_up, 0, 2'000 * kUs));
}

std::vector<std::uint64_t> launches_of(const std::vector<FakeBatch>& v) {
  std::vector<std::uint64_t> out;
  out.reserve(v.size());
  for (const FakeBatch& b : v) out.push_back(b.launches);
  return out;
}

TEST(MergeDoneBatches, ARunKeepsTheLatestOfEachStream) {
  // Alternating phases behind a long kernel: joined, A, joined, B, joined,
  // A, joined, B, all done. The joined ones and the earlier A and B fold
  // forward; the latest A and B stay (they say the two caught up).
  std::vector<FakeBatch> later;
  later.reserve(8);
  const CUstream a = stream(1), b = stream(2), none = BatchStreams::none();
  std::uintptr_t n = 0;
  for (CUstream s : {none, a, none, b, none, a, none, b}) {
    later.push_back({.launches = 1,
                     .stream = s,
                     .seen_done = true,
                     .first_submit_ns = 100 * n,
                     .several_streams = s == none,
                     .event = event(n)});
    ++n;
  }
  std::vector<CUevent> released;
  later.erase(
      merge_done_batches(later.begin(), later.end(), [&](CUevent ev) { released.push_back(ev); }),
      later.end());
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[0].stream, a);
  EXPECT_EQ(later[0].event, event(5));
  EXPECT_EQ(later[0].first_submit_ns, 0u);  // from the first of the run
  EXPECT_EQ(later[1].stream, b);
  EXPECT_EQ(launches_of(later), (std::vector<std::uint64_t>{6, 2}));
  EXPECT_EQ(released.size(), 6u);
  // Both still say their stream caught up.
  EXPECT_TRUE(scan(later, a).q.stream_caught_up);
  EXPECT_TRUE(scan(later, b).q.stream_caught_up);
}

TEST(MergeDoneBatches, NotAcrossABatchNotDoneNorTheLastOfAStream) {
  const CUstream a = stream(1), b = stream(2);
  std::vector<FakeBatch> later{
      {.launches = 1, .stream = a, .seen_done = true, .event = event(0)},
      {.launches = 2, .stream = a, .seen_done = true, .event = event(1)},
      {.launches = 3, .stream = b, .seen_done = false, .event = event(2)},
      {.launches = 4, .stream = BatchStreams::none(), .seen_done = true, .event = event(3)},
      {.launches = 5, .stream = b, .seen_done = true, .event = event(4)},
      {.launches = 6, .stream = a, .seen_done = false, .event = event(5)}};
  later.erase(merge_done_batches(later.begin(), later.end(), [](CUevent) {}), later.end());
  // a's first folds into its second; the joined one into b's; none across
  // the batches not done.
  EXPECT_EQ(launches_of(later), (std::vector<std::uint64_t>{3, 3, 9, 6}));
}

}  // namespace
}  // namespace cushare::shim::gate
