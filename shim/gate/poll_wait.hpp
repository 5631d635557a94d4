// When an application's query of its work (cuStreamQuery, cuEventQuery) is
// where it waits for that work (docs/scheduler.md, "Polling"). Pure: the
// tracker reads the figures and acts on the answers.
#pragma once

#include <cstdint>
#include <limits>

namespace cushare::shim::gate {

// A query is taken for a wait only once the process launched nothing on the
// GPU for this long (on the gate's clock).
inline constexpr std::uint64_t kPollQuietNs = 10'000;
// No launch count matches it.
inline constexpr std::uint64_t kNoLaunchCount = std::numeric_limits<std::uint64_t>::max();

struct PollView {
  bool has_tail = false;       // launches no recorded event covers yet
  std::uint64_t launches = 0;  // this process's launch count on the GPU, now
  // The launch count when a query last found the work pending, and when a
  // query last could not record the tail (another stream's, a capture, a
  // failed record); kNoLaunchCount: never.
  std::uint64_t not_ready_at = kNoLaunchCount;
  std::uint64_t declined_at = kNoLaunchCount;
  std::uint64_t tail_last_ns = 0;  // the last launch's stamp
  std::uint64_t now_ns = 0;
};

// Whether the query about to be made records the tail first, as a sync does.
// A process may query while it keeps launching (an allocator looking at its
// blocks' events, a watchdog thread): a query is a wait only when an earlier
// one found the work pending with no launch since, and the process has been
// quiet for kPollQuietNs. A tail that could not be recorded is not tried
// again before the next launch: a polling loop would retry it at every query.
constexpr bool poll_records_tail(const PollView& v) noexcept {
  return v.has_tail && v.not_ready_at == v.launches && v.declined_at != v.launches &&
         v.now_ns >= v.tail_last_ns + kPollQuietNs;
}

// The querying thread's own history on the GPU.
struct QueryingThread {
  bool made_last_launch = false;  // it made the last launch counted
  // After its last record for a pending query it queried again, whatever
  // the answer, before it launched (it was waiting); true before any.
  bool waited_last_time = true;
  bool pending_before = false;  // a query of it found work pending at this launch count already
};

// Whether a query that found the work pending records the tail now. The
// thread that made the last launch waits for it (a loop that launches, then
// polls): recorded while the work still runs, the tail's event dates its
// completion on the GPU's clock; recorded at a later query, after the work
// completed, it would date it at that query (a loop sleeping ~100 us between
// queries of 100 us kernels was charged ~26 us a kernel of its idle time).
// A thread that queried once and launched again instead (an allocator
// looking at its blocks' events before each launch) was not waiting: it
// records again only at a second pending query at one launch count.
constexpr bool pending_query_records_tail(const PollView& v, const QueryingThread& t) noexcept {
  return v.has_tail && t.made_last_launch && v.declined_at != v.launches &&
         (t.waited_last_time || t.pending_before);
}

}  // namespace cushare::shim::gate
