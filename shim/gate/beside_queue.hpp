// What the streams have queued beside a batch of other streams that is
// still running (gate/tracker.hpp): the launches behind that oldest batch
// are in batches of their own, and those recorded on one stream alone
// complete in that stream's order. A launch held by the queue bound behind
// such a batch may go while its own stream's queue, and what all the
// streams going beside it have queued, stay short (docs/scheduler.md, "A
// long kernel on another stream"). Pure: the driver's event query is
// passed in, unit-tested (beside_queue_test).
//
// The batches, oldest first, each with `launches`, the one `stream` its
// event was recorded on (BatchStreams::none() where it joined several),
// `seen_done` (sticky: an event is reused only once its batch is completed
// and gone) and `done_seen_ns`, `first_submit_ns` and `event`.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "shim/driver/cuda_api.hpp"
#include "shim/gate/batch_streams.hpp"

namespace cushare::shim::gate {

struct BesideQueue {
  // Launches not known done of the batches behind the latest one on the
  // stream alone that completed, whatever their stream: a batch recorded
  // on one stream (or joined over several) may hold launches of others, so
  // only this sum never undercounts the stream's.
  std::uint64_t pending = 0;
  // A batch recorded on the stream alone completed: every launch on the
  // stream before it, those in the oldest batch included, has run.
  bool stream_caught_up = false;
  // Some batch behind the oldest is recorded on the stream alone (without
  // one, nothing will tell whether it caught up: the caller records one).
  bool stream_recorded = false;
  // Launches not known done of the batches on a stream alone that caught
  // up: what every stream going beside the oldest batch has queued. One
  // allowance bounds them all, however many streams share it. (Not the
  // joined batches': one that waits for the long kernel would hold every
  // stream back until it ended, and which of its launches went beside is
  // not known. A record joins when launches went to several streams since
  // the last.)
  std::uint64_t beside_total = 0;
  // More streams than the scan keeps track of: nothing goes beside.
  bool too_many_streams = false;
};

// Whether a launch on `launch` held behind the oldest batch may look past
// it at its own stream's queue (beside_queue): that batch covers several
// streams, or is recorded on one stream alone (`oldest`: nullptr for the
// legacy stream, CU_STREAM_PER_THREAD for its recording thread's own) that
// the launch's stream does not wait for. `own` is the launch's stream as
// its records go (recordable_stream; nullptr for the legacy stream by
// either handle). In the driver the legacy stream waits for every blocking
// stream's earlier work, and a blocking stream, a per-thread one included,
// for the legacy stream's: so behind a blocking stream's batch the legacy
// stream does not look, nor a blocking stream behind the legacy stream's
// (`oldest_non_blocking`: the oldest batch's stream was made non-blocking;
// `own_non_blocking()` asks the same of the launch's, a driver call, only
// where that decides). Nor does a per-thread default stream behind a batch
// of one (its own, or another thread's, whose records wait where it does).
// Those launches wait for the batch instead of looking again every
// kBesidePollNs until it ends.
template <class NonBlocking>
bool looks_beside(bool oldest_several_streams, CUstream oldest, bool oldest_non_blocking,
                  CUstream launch, CUstream own, NonBlocking&& own_non_blocking) {
  if (oldest_several_streams) return true;
  if (oldest == own) return false;
  if (launch == CU_STREAM_PER_THREAD && oldest == CU_STREAM_PER_THREAD) return false;
  if (launch == nullptr || launch == CU_STREAM_LEGACY) return oldest_non_blocking;
  return oldest != nullptr || own_non_blocking();
}

// Streams the scans keep track of behind the oldest batch.
inline constexpr std::size_t kBesideStreams = 16;

// Scans the batches behind the oldest, [first, last) (the oldest recorded
// on `oldest_stream` alone, BatchStreams::none() where it joined several),
// at `now`, querying each not yet seen done with `done(batch)`, marking those found done, and
// handing each found done on a stream alone, with launches, to
// `sample(batch, previous_ns)`: previous_ns is when the batch before it on
// that stream was seen done (0: none behind the oldest), so the batch ran
// from the later of that and its first submission until about now. Behind
// a batch of a stream that has not completed, none of that stream's is
// queried (they complete in order).
template <class It, class Done, class Sample>
BesideQueue beside_queue(It first, It last, CUstream oldest_stream, CUstream stream,
                         std::uint64_t now, Done&& done, Sample&& sample) {
  struct Seen {
    CUstream stream;
    std::uint64_t done_ns;  // when its latest batch was seen done (0: none yet)
    bool behind;            // one of its batches has not completed
  };
  std::array<Seen, kBesideStreams> seen{};
  std::size_t count = 0;
  // The oldest batch is not known done: its stream's later batches complete
  // after it (one found done meanwhile would date the long kernel's end as
  // its own, a sample of the whole kernel).
  if (oldest_stream != BatchStreams::none())
    seen[count++] = {.stream = oldest_stream, .done_ns = 0, .behind = true};
  BesideQueue q;
  for (; first != last; ++first) {
    auto& b = *first;
    const bool own = b.stream == stream;
    q.stream_recorded = q.stream_recorded || own;
    Seen* s = nullptr;
    if (b.stream != BatchStreams::none()) {
      s = std::find_if(seen.begin(), seen.begin() + count,
                       [&](const Seen& x) { return x.stream == b.stream; });
      if (s == seen.begin() + count) {
        if (count < seen.size()) {
          seen[count++] = {.stream = b.stream, .done_ns = 0, .behind = false};
        } else {
          q.too_many_streams = true;
          s = nullptr;
        }
      }
    }
    if (!b.seen_done && !(s && s->behind) && done(b)) {
      b.seen_done = true;
      b.done_seen_ns = now;
      if (s && b.launches != 0) sample(b, s->done_ns);
    }
    if (b.seen_done) {
      if (s) s->done_ns = std::max<std::uint64_t>(b.done_seen_ns, 1);
      // The stream ran everything it had before this record: what it has
      // queued is in the batches behind it.
      if (own) {
        q.pending = 0;
        q.stream_caught_up = true;
      }
      continue;
    }
    if (s) s->behind = true;
    q.pending += b.launches;
    if (s && s->done_ns != 0) q.beside_total += b.launches;
  }
  return q;
}

// Whether a launch on a stream whose queue is `q` fits `allowance_ns`
// (GateAction::beside_ns), each launch priced at `per_launch_ns`, both in
// its stream's queue and in what all the streams going beside have queued:
// only once the stream is known to have caught up with the oldest batch,
// whose launches on it are not counted, and with a per-launch figure
// (before the first batch completed, nothing prices a queue: only a stream
// with nothing queued goes beside).
inline bool beside_allows(const BesideQueue& q, std::uint64_t per_launch_ns,
                          std::uint64_t allowance_ns) noexcept {
  if (!q.stream_caught_up || q.too_many_streams || per_launch_ns == 0) return false;
  const std::uint64_t launches = allowance_ns / per_launch_ns;
  return q.pending < launches && q.beside_total < launches;  // with this one, they fit
}

// Behind a batch that runs long, the batches the streams beside it complete
// would pile up (one per record) until it ends. Within each run of batches
// seen done behind the oldest, [first, last), one is folded into the next
// when it says nothing a later one does not: it joined several streams, or
// a later batch on its stream is done too. The next keeps its event (and
// what it covers, done already) and takes the folded one's first
// submission and launches; the folded one's event goes to
// `release(event)`. So a run keeps about one batch per stream. Returns the
// new end (the caller erases the rest).
template <class It, class Release>
It merge_done_batches(It first, It last, Release&& release) {
  std::array<CUstream, kBesideStreams> later{};  // streams with a later batch seen done
  std::size_t count = 0;
  bool full = false;
  It next = last;  // the batch after the one looked at, as kept
  for (It it = last; it != first;) {
    --it;
    auto& b = *it;
    if (!b.seen_done) {
      next = it;
      continue;
    }
    const bool single = b.stream != BatchStreams::none();
    const bool known_later = single && std::find(later.begin(), later.begin() + count, b.stream) !=
                                           later.begin() + count;
    if (next != last && next->seen_done && !full && (!single || known_later)) {
      next->first_submit_ns = b.first_submit_ns;
      next->launches += b.launches;
      release(b.event);
      b.event = nullptr;  // folded: erased below
    } else {
      next = it;
    }
    if (single && !known_later) {
      if (count < later.size()) {
        later[count++] = b.stream;
      } else {
        full = true;  // a stream not kept track of: fold no more
      }
    }
  }
  return std::remove_if(first, last, [](const auto& b) { return b.event == nullptr; });
}

}  // namespace cushare::shim::gate
