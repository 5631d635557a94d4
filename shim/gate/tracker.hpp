// In-flight work tracking of the launch gate, per GPU of the allocation, in
// this process. Launches are grouped into batches; each batch ends with an
// event recorded on the stream of its last launch (every kRecordEvery
// launches or kRecordInterval of submit time, never on a stream under
// capture), or, where the batch went to several streams, on the tracker's
// own stream once it waited for an event on each (batch_streams.hpp). A poller thread per GPU waits
// for the oldest batch's event (blocking-sync event: no CPU spin), then publishes the drain marks
// the daemon charges overrun from. The fast path only reads a few counters to bound the queued work
// (docs/scheduler.md, "Launch gate").
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "shim/driver/cuda_api.hpp"
#include "shim/gate/batch_streams.hpp"
#include "shim/gate/estimate.hpp"
#include "shim/gate/per_thread_stream.hpp"
#include "shim/gate/poll_wait.hpp"
#include "shm/layout.hpp"

namespace cushare::shim::gate {

// A batch ends after kRecordIntervalNs of submissions; on hardware, where a
// launch takes microseconds, that interval is always the limit. The count
// only bounds drivers that launch in well under a microsecond, like fakegpu:
// at 256 its batches came six times as often as on hardware, and the
// poller's work per batch cost every launch ~16 ns (docs/benchmarks.md).
inline constexpr std::uint32_t kRecordEvery = 4096;          // launches per batch at most
inline constexpr std::uint64_t kRecordIntervalNs = 250'000;  // submit time per batch at most
// A batch of fewer launches over less than kRecordIntervalNs is mostly
// measurement error (GpuTracker::complete_front_locked).
inline constexpr std::uint64_t kSignificantBatch = 32;
// A launch held behind a batch of other streams looks at its own stream
// again after about one launch, and at least this long (tiny kernels would
// wake it tens of thousands of times a second).
inline constexpr std::uint64_t kBesidePollNs = 200'000;

struct Batch {
  CUevent event = nullptr;
  std::uint64_t end_count = 0;  // launches submitted up to and including this batch
  std::uint64_t first_submit_ns = 0;
  std::uint64_t last_submit_ns = 0;
  // Its event covers several streams (on the join stream): it completes with
  // the slowest of them.
  bool several_streams = false;
  // For a launch held behind an older batch of other streams
  // (beside_queue.hpp): its launches, the one stream its event is on
  // (BatchStreams::none() where joined, nullptr for the legacy stream by
  // either handle, CU_STREAM_PER_THREAD for the recording thread's own
  // where it alone launched there), and whether that event was seen
  // complete while an older batch was not.
  std::uint64_t launches = 0;
  CUstream stream = BatchStreams::none();
  // That stream was made non-blocking (asked at the record, while the
  // stream is known to exist: it may be destroyed before the batch is done).
  bool non_blocking = false;
  bool seen_done = false;
  std::uint64_t done_seen_ns = 0;
};

// What a record of the tail before a wait came to.
enum class TailRecord {
  kRecorded,
  kNothing,  // no tail (or nothing launched here)
  kNotHere,  // this call cannot cover it: another stream's, thread's or context's
  kCannot,   // a capture, or the driver refused the record
};

// What an application's synchronisation waits for.
enum class SyncScope {
  kStream,   // one stream's work (cuStreamSynchronize)
  kContext,  // the whole context's (cuCtxSynchronize)
  // Work on a stream the call does not name (an event's, a copy's): the
  // tail is recorded on its own stream, except a per-thread default stream,
  // whose handle would mean the caller's: recorded there where the caller
  // launched the tail and no other thread launched on theirs, else left to
  // the poller (recorded on the legacy stream at each such call, it would
  // put a barrier across every blocking stream).
  kUnnamedStream,
};

class GpuTracker {
  friend class RecordsHeld;
  friend class ContextEnding;

 public:
  // Fast path: GPU time of the work launched and not known complete
  // (gate/estimate.hpp).
  [[gnu::always_inline]] std::uint64_t queued_estimate_ns(std::uint64_t now,
                                                          std::uint64_t horizon_ns) const noexcept {
    const std::uint64_t completed = completed_.load(std::memory_order_acquire);
    const std::uint64_t pending = submitted_count() - completed;
    if (pending == 0) return 0;
    // The GPU has been working through the queue since the last completion
    // we saw (or since the oldest pending launch, if it came later).
    const std::uint64_t oldest = oldest_batch_ns_.load(std::memory_order_relaxed);
    const std::uint64_t since =
        std::max(last_completion_atomic_.load(std::memory_order_relaxed),
                 oldest ? oldest : tail_first_ns_.load(std::memory_order_relaxed));
    const std::uint64_t oldest_end = oldest_batch_end_.load(std::memory_order_relaxed);
    return estimate_queued_ns(
        {.pending = pending,
         .per_launch_ns = per_launch_ns_.load(std::memory_order_relaxed),
         .since_ns = since,
         .head = oldest && oldest_end > completed ? oldest_end - completed : pending,
         .window = window_.load(std::memory_order_relaxed)},
        now, horizon_ns);
  }
  // At exit: launches of a tail never recorded (no synchronisation since)
  // are added to usage.launches.
  void publish_unrecorded_launches() noexcept;
  // Publishes when the work submitted so far should be done (GpuUsage::expected_drain_ns).
  void publish_expected_drain(std::uint64_t now, shm::GpuUsage& usage) const noexcept;
  std::uint64_t pending_launches() const noexcept {
    return submitted_count() - completed_.load(std::memory_order_acquire);
  }
  // Launches not covered by any recorded event yet.
  bool has_tail() const noexcept {
    return submitted_count() > recorded_count_.load(std::memory_order_acquire);
  }
  std::uint64_t per_launch_ns() const noexcept {
    return per_launch_ns_.load(std::memory_order_relaxed);
  }
  // The same with the time slices of the allocation's other busy processes
  // taken out (each sample divided by their number with this one): what a
  // launch takes while it has the GPU to itself. What usage.per_launch_us
  // publishes; cut leases weigh it (gate_decision.hpp, cut_per_launch_ns).
  std::uint64_t own_per_launch_ns() const noexcept {
    const std::uint64_t own = own_per_launch_ns_.load(std::memory_order_relaxed);
    return own != 0 ? own : per_launch_ns();
  }

  // After a successful launch at `now` on `stream` (fast path; records an
  // event when a batch is due, which takes the tracker's mutex).
  void on_launch(CUstream stream, std::uint64_t now, shm::GpuUsage& usage) noexcept {
    // Counted first: the launch is in its stream already, so any event
    // recorded after a record_locked() saw this count covers it. The poller
    // may have found the queue empty and set kIdle between this launch's
    // gate check and its count: one RMW on the same word orders the two, so
    // either it sees this launch or this launch sees kIdle and marks again.
    // The stream first: whoever sees this launch counted finds its stream
    // (and, on the per-thread stream, whose it is).
    if (stream == CU_STREAM_PER_THREAD) per_thread_.on_launch(launching_thread_id());
    streams_.on_launch(stream);
    // Stamped before it is counted (and before begin_tail wakes the poller):
    // the poller records a tail once its newest launch is a batch old, and
    // one that found this launch counted with the stamp of the launch before
    // (a long kernel after a sync, say) recorded it alone at once, a batch
    // of one stream the launches that follow on others were held behind.
    tail_last_ns_.store(now, std::memory_order_relaxed);
    if (submitted_.fetch_add(1, std::memory_order_seq_cst) & kIdle) [[unlikely]]
      mark_busy();
    if (tail_first_ns_.load(std::memory_order_relaxed) == 0) [[unlikely]]
      begin_tail(now);
    // Load + store, not an RMW: racing launchers at worst delay a record.
    const std::uint32_t n = since_record_.load(std::memory_order_relaxed) + 1;
    since_record_.store(n, std::memory_order_relaxed);
    if (n < kRecordEvery &&
        now < last_record_ns_.load(std::memory_order_relaxed) + kRecordIntervalNs) [[likely]] {
      return;
    }
    end_batch(stream, now, usage);
  }

  // Whether this process counts itself in usage.gpus[gpu].busy_processes
  // (set before its first launch after an idle spell, cleared by the poller
  // once everything completed).
  bool busy() const noexcept { return !(submitted_.load(std::memory_order_relaxed) & kIdle); }
  // Returns the allocation's new busy_epoch when this made it busy (0 -> 1
  // processes with work in flight), else 0.
  std::uint32_t mark_busy() noexcept;
  // First launch of a spell (this process idle until now), before it goes to
  // the driver on `stream`: marks busy and, when this process was the last
  // one busy in the allocation, measures the gap since its previous spell on
  // the GPU's clock (a timing event here against the last event of that
  // spell). The gap is published in usage.idle_ns once both completed.
  // `probe_wait`: also measure the spell's wait for the GPU behind other
  // contexts (the local duty cycle's idle time; spell_wait.hpp).
  void begin_spell(CUstream stream, shm::GpuUsage& usage, bool probe_wait) noexcept;
  void bind_gpu(unsigned gpu) noexcept { gpu_ = gpu; }
  // A launch that passed the gate failed: if nothing is in flight, leave the
  // busy count again (the enter marked it for the launch that did not happen).
  void launch_failed() noexcept;

  // Slow path: waits until about `excess_ns` of the queued work has run
  // (by the estimate), or for the oldest batch when there is no estimate.
  // `beside_ns`: how much of its own stream's work a launch may have queued
  // beside the others, itself included (GateAction::beside_ns; 0: none).
  // Returns true where it goes now, whatever the estimate: the oldest batch
  // covers several streams, or one the driver runs `stream` beside
  // (looks_beside), and `stream` has caught up with that batch and keeps
  // less than `beside_ns` queued behind it (beside_queue.hpp), or has
  // nothing queued (not the legacy stream, whose work waits for the
  // blocking streams'; docs/scheduler.md, "A long kernel on another stream").
  [[nodiscard]] bool wait_for_progress(CUstream stream, std::uint64_t excess_ns,
                                       std::uint64_t beside_ns, shm::GpuUsage& usage) noexcept;

  // The application destroys `stream`: work of the batch on it is recorded
  // now, while the handle is valid, and the stream forgotten, so no later
  // record names it.
  void stream_destroyed(CUstream stream) noexcept;

  // The application synchronises with the work of this process on the
  // tracker's GPU (SyncScope). Before: the tail of launches gets its event,
  // so the sync has one to complete. After a successful sync: every batch
  // whose event completed is completed here and now, so a launch right after
  // the sync starts a new spell and its idle gap is measured (the poller may
  // not have woken yet).
  void before_sync(CUstream stream, SyncScope scope) noexcept;
  TailRecord record_tail(CUstream stream, SyncScope scope) noexcept;
  void after_sync() noexcept;
  // A thread about to sleep at the gate (a closed duty-cycle slot, a lease
  // to wait for) that alone launches on its per-thread default stream and
  // launched the unrecorded tail there: the tail gets its event on that
  // stream now. Left to the poller, which launches nothing, it would go on
  // the legacy stream 250 µs later, a barrier behind every blocking
  // stream's work (per_thread_stream.hpp). Lock-free when there is nothing
  // to record.
  void record_own_tail() noexcept {
    if (!has_tail() || streams_.tail() != CU_STREAM_PER_THREAD ||
        !per_thread_.only(launching_thread_id()))
      return;
    (void)record_tail(CU_STREAM_PER_THREAD, SyncScope::kStream);
  }
  // The application queries work of this process (SyncScope) at `now` (the
  // gate's clock). Where poll_wait.hpp says the query is a wait, the tail
  // gets its event first, as before a sync, so the poller sees the work
  // complete when it does. Returns the launch count seen, for after_poll().
  std::uint64_t before_poll(CUstream stream, SyncScope scope, std::uint64_t now) noexcept;
  // record_tail() for a query at launch count `launches`; whether it
  // recorded. A capture or a refused record marks the count declined.
  bool record_tail_for_poll(CUstream stream, SyncScope scope, std::uint64_t launches) noexcept;
  // After the query answered `rc`: work found pending is remembered for the
  // next query, and the tail recorded where poll_wait.hpp says; found done,
  // with the tail recorded, the batches whose events completed are completed
  // (at most once per kPollQuietNs).
  void after_poll(CUstream stream, SyncScope scope, CUresult rc,
                  std::uint64_t launches_before) noexcept;
  // Completes, in the calling thread, every batch at the front whose event
  // has completed; whether there was one.
  bool complete_done_batches(shm::GpuUsage& usage) noexcept;

  // The allocation's idle time on this GPU as this process sees it,
  // cumulative up to `t` (at or after its last transition): the gaps that
  // began when this process left the allocation idle and ended when it made
  // it busy again, no other process busy in between, and the gap it is in
  // now. A gap another process of the allocation ended counts as busy time:
  // the local duty cycle then stops early rather than late.
  std::uint64_t idle_until_ns(std::uint64_t t) noexcept;
  // The same at `open`, the start of a duty-cycle period, taken once in it:
  // the waits of spells that began before it (spell_wait.hpp) settle later,
  // into the next figure, so they are no longer counted.
  std::uint64_t idle_at_period_start_ns(std::uint64_t open) noexcept;

  // Fork child: forget the parent's events and thread.
  void reset_after_fork() noexcept;

  // The application ends a context (ContextEnding, below); all under the lock.
  // Whether the tracker's handles live in `ctx`: its batches' events, its
  // probe or join stream.
  bool names_context_locked(CUcontext ctx) const noexcept;
  // The streams filed in the batch set that belong to `ctx` (asked of the
  // driver while they still exist), added to `out` up to its end.
  CUstream* streams_of_locked(CUcontext ctx, CUstream* out, CUstream* end) noexcept;
  // `ctx` is gone, and the driver destroyed its events and streams with it:
  // the tracker forgets them without a call, and the work it had counted in
  // flight there ended with the context (also where the tracker had not
  // learnt its context yet and `streams_in_ctx`: streams of `ctx` were filed,
  // so its tail went there).
  void context_ended_locked(CUcontext ctx, bool streams_in_ctx) noexcept;

 private:
  // submitted_'s top bit: this process is not counted busy (set by the
  // poller when it found everything complete, and at start); the rest is
  // the launch count.
  static constexpr std::uint64_t kIdle = 1ull << 63;
  std::uint64_t submitted_count() const noexcept {
    return submitted_.load(std::memory_order_acquire) & ~kIdle;
  }
  void begin_tail(std::uint64_t now) noexcept;
  void end_batch(CUstream stream, std::uint64_t now, shm::GpuUsage& usage) noexcept;
  void record_locked(CUstream stream, std::uint64_t now, shm::GpuUsage* usage) noexcept;
  void ensure_poller(shm::GpuUsage& usage) noexcept;
  void poll_loop(shm::GpuUsage* usage) noexcept;
  // A wait outside the lock on `ev`, an event of the front batch (the
  // poller's and a launching thread's): counted in waits_out_, so that a
  // context's end waits for it to return before the driver destroys the
  // event (ContextEnding).
  CUresult wait_for_event(CUevent ev) noexcept;
  // Whether a launch on `stream` may look past the oldest batch: that batch
  // covers several streams, or is recorded on one other stream that the
  // launch's does not wait behind (looks_beside).
  bool beside_oldest_locked(CUstream stream) const noexcept;
  // Whether it may and its stream has nothing queued, or less than
  // `beside_ns` of work behind it (queries of it and of the later batches'
  // events, in the relaxed mode during a capture).
  bool beside_oldest_allows_locked(CUstream stream, std::uint64_t beside_ns,
                                   shm::GpuUsage& usage) noexcept;
  // Whether `stream` was made non-blocking (it does not wait for the legacy
  // stream's work; the per-thread default stream does).
  bool non_blocking(CUstream stream) const noexcept;
  // A batch's GPU time per launch, `launches` over `span_ns`, moves the
  // per-launch figure (estimate.hpp; only down unless `may_raise`) and is
  // published.
  void sample_per_launch_locked(std::uint64_t launches, std::uint64_t span_ns, bool may_raise,
                                shm::GpuUsage& usage) noexcept;
  // Whether `ev` completed before the batch completed last (the anchor), by
  // the GPU's clock.
  bool completed_before_anchor_locked(CUevent ev) noexcept;
  void complete_front_locked(CUevent ev, std::uint64_t seen_ns, shm::GpuUsage& usage) noexcept;
  void complete_waited_front_locked(CUevent ev, shm::GpuUsage& usage) noexcept;
  void publish_drained(std::uint64_t value, shm::GpuUsage& usage) noexcept;
  bool settle_idle_locked() noexcept;
  void settle_gap_locked(shm::GpuUsage& usage, CUevent completed) noexcept;
  CUevent record_start_probe_locked() noexcept;
  CUevent take_event_locked() noexcept;
  // Where a record for work launched on `stream` goes (the legacy stream for
  // the per-thread stream of several threads).
  CUstream recordable_stream(CUstream stream) const noexcept;
  // An event recorded on `stream` (from the pool, else new), or null.
  CUevent record_event_locked(CUstream stream) noexcept;
  // One event for work on several streams: an event on each, waited for by
  // the tracker's join stream, and the event recorded there; null where
  // there is no join stream here (another context) or its record failed.
  CUevent record_joined_locked(const CUstream* streams, std::size_t count) noexcept;
  // The tracker's join stream in the current context (null: none here).
  CUstream join_stream_locked() noexcept;
  // Back to the free list unless one of the roles below still holds it.
  void release_locked(CUevent ev) noexcept;
  std::uint64_t completed_at_locked(CUevent ev, std::uint64_t seen_ns,
                                    std::uint64_t recorded_ns) noexcept;

  std::atomic<std::uint64_t> submitted_{kIdle};      // launches forwarded by this process, | kIdle
  std::atomic<std::uint64_t> completed_{0};          // of those, known complete
  std::atomic<std::uint64_t> recorded_count_{0};     // of those, covered by a recorded event
  std::atomic<std::uint64_t> per_launch_ns_{0};      // EMA of GPU time per launch
  std::atomic<std::uint64_t> own_per_launch_ns_{0};  // own_per_launch_ns()
  std::atomic<std::uint64_t> window_{kBootstrapPending};  // slow start (gate/estimate.hpp)
  std::uint64_t published_launches_ = 0;        // under mu_: launches added to usage.launches
  std::atomic<shm::GpuUsage*> usage_{nullptr};  // the poller's, once it started
  std::uint64_t last_completion_ns_ = 0;        // under mu_
  std::atomic<std::uint64_t> last_completion_atomic_{0};  // same, for the fast path
  std::atomic<std::uint64_t> oldest_batch_ns_{0};   // first submit of the oldest recorded batch
  std::atomic<std::uint64_t> oldest_batch_end_{0};  // its end_count
  std::atomic<std::uint64_t> tail_first_ns_{0};     // first unrecorded launch (0: none)
  std::atomic<std::uint64_t> tail_last_ns_{0};
  BatchStreams streams_;  // the last launch's stream, and those the batch left behind
  PerThreadStreamLaunchers
      per_thread_;  // whether one thread alone launches on its per-thread stream
  std::atomic<std::uint64_t> last_record_ns_{0};
  std::atomic<std::uint32_t> since_record_{0};
  std::atomic<std::uint32_t> wake_word_{0};         // poller FUTEX_WAITs here when idle
  std::atomic<std::uint32_t> progress_word_{0};     // bumped on every completed batch
  std::atomic<std::uint32_t> progress_waiters_{0};  // launching threads waiting on it
  std::atomic<bool> poller_idle_{false};
  // Queries (poll_wait.hpp): the launch count when one last found the work
  // pending, and when one last could not record the tail; when a query that
  // found it done last looked at the batches.
  std::atomic<std::uint64_t> poll_not_ready_at_{kNoLaunchCount};
  std::atomic<std::uint64_t> poll_declined_at_{kNoLaunchCount};
  std::atomic<std::uint64_t> poll_checked_ns_{0};
  unsigned gpu_ = 0;  // index in limits.gpus[] (bound once, at creation)
  std::atomic<bool> poller_started_{false};

  std::mutex mu_;  // batches_, free_events_, ctx_ (never on the fast path)
  std::deque<Batch> batches_;
  std::vector<CUevent> free_events_;
  CUcontext ctx_ = nullptr;
  // Bumped (under mu_) when ctx_ ends: the poller makes the next ctx_
  // current then.
  std::uint32_t ctx_epoch_ = 0;
  // Threads inside wait_for_event(); raised only under mu_, and not while
  // ending_ (a ContextEnding waits for it to fall to 0).
  std::atomic<std::uint32_t> waits_out_{0};
  // ContextEndings under way that hold this tracker (two threads may end
  // the same primary context at once). Under mu_.
  std::uint32_t ending_ = 0;
  // Idle gaps (begin_spell). Under mu_.
  struct GapProbe {
    CUevent from = nullptr;     // last batch event of the spell before the gap
    CUevent to = nullptr;       // recorded before the first launch after it
    std::uint64_t clip_ns = 0;  // at most this much of it counts (time since the lease's start)
    // Recorded on probe_stream_ right after `to`: completes when the
    // context reaches the GPU, whatever the application's streams hold.
    CUevent start = nullptr;
    // A batch of the spell completed before `start` did (streams run
    // independently): its wait is not measured.
    bool start_lagged = false;
    std::uint64_t begun_ns = 0;    // the spell began then (before `start` was recorded)
    std::uint64_t from_lo_ns = 0;  // `from` completed no earlier (0: unknown)
    // The idle gap the CPU's clock counted began here (0: none counted).
    std::uint64_t counted_from_ns = 0;
    // `start` was seen complete then, right after its record (0: it was not).
    std::uint64_t start_seen_ns = 0;
  };
  // The tracker's own non-blocking stream in the context it tracks, for
  // GapProbe::start (created at the first spell; null: none, or the context
  // it was made in is gone). Under mu_.
  CUstream probe_stream_ = nullptr;
  CUcontext probe_ctx_ = nullptr;  // the context probe_stream_ belongs to
  // The non-blocking stream a batch's event goes on when the batch went to
  // several streams (record_joined_locked), in ctx_; null until needed, or
  // when ctx_ is gone. Under mu_.
  CUstream join_stream_ = nullptr;
  CUcontext join_ctx_ = nullptr;
  CUevent spell_end_ = nullptr;        // last event of the last spell that left the allocation idle
  std::uint64_t spell_end_lo_ns_ = 0;  // it completed no earlier (0: unknown)
  // The last measured spell's start: its `to` event and when that
  // completed at the earliest (spell_wait.hpp), the chain's link to the
  // spell's end.
  struct SpellStart {
    CUevent event = nullptr;
    std::uint64_t lo_ns = 0;
  } spell_start_;
  std::uint64_t wait_floor_ns_ = 0;  // idle_at_period_start_ns()
  std::uint32_t idle_epoch_ = 0;     // usage.busy_epoch then
  // idle_until_ns(): the gaps that ended, and when the one in progress began
  // (0: none of ours). Under mu_.
  std::uint64_t idle_total_ns_ = 0;
  std::uint64_t idle_since_ns_ = 0;
  bool left_idle_ = false;  // the last settle_idle_locked() left the allocation idle
  GapProbe gap_;
  std::uint64_t spell_wait_locked(const GapProbe& done, std::uint64_t started_ns) noexcept;
  // No other process is attached to the allocation: none can have run on
  // its GPU time unseen.
  bool alone_in_allocation() noexcept;
  // The last completed batch event and when it completed at the latest
  // (completed_at_locked). Under mu_.
  static constexpr std::uint64_t kAnchorSpanNs = 1'000'000'000;
  struct Anchor {
    CUevent event = nullptr;
    std::uint64_t at_ns = 0;
    std::uint64_t since_ns = 0;  // the chain of bounds began then
  } anchor_;
};

namespace detail {
using Trackers = std::array<GpuTracker, shm::kMaxGpus>;
extern std::atomic<Trackers*> g_trackers;
Trackers& create_trackers() noexcept;
}  // namespace detail

// Tracker of limits.gpus[gpu] in this process (inline: on the fast path).
inline GpuTracker& tracker(unsigned gpu) noexcept {
  detail::Trackers* t = detail::g_trackers.load(std::memory_order_acquire);
  if (!t) [[unlikely]]
    t = &detail::create_trackers();
  return (*t)[gpu % shm::kMaxGpus];
}
void reset_trackers_after_fork() noexcept;
// Held around the driver's beginning of a capture: no record of the gate is
// under way meanwhile, so each record's check of its streams sees the
// capture or comes before it. A record into the capture would fork the
// gate's join stream into it, and the application's end of the capture
// would fail (a stream left unjoined).
class RecordsHeld {
 public:
  RecordsHeld() noexcept;
  ~RecordsHeld();
  RecordsHeld(const RecordsHeld&) = delete;
  RecordsHeld& operator=(const RecordsHeld&) = delete;

 private:
  detail::Trackers* trackers_;
};
// Held around the driver's end of a context (cuCtxDestroy, a primary
// context's last release or its reset), and only around it. Made before the
// call: every tracker is locked for the call, in the trackers' order (as
// RecordsHeld), once no thread waits outside the lock on an event of a
// tracker with anything in the context (its batches' context, its probe or
// join stream's, or application streams of it filed in its batch set):
// such a tracker starts no new wait while this waits for those under way,
// unlocked (other threads go on meanwhile). So no record, query or wait of
// the gate names a handle of the context while the driver destroys it.
// The streams of the context filed then are noted. After a call that ended
// the context, ended(): the trackers forget the handles the driver
// destroyed, and the noted streams leave the sets.
class ContextEnding {
 public:
  explicit ContextEnding(CUcontext ctx) noexcept;
  ~ContextEnding();
  ContextEnding(const ContextEnding&) = delete;
  ContextEnding& operator=(const ContextEnding&) = delete;
  void ended() noexcept;

 private:
  // Every tracker locked, no wait on one with anything in ctx_ under way
  // (or the deadline passed); the streams of ctx_ noted.
  void hold_all(detail::Trackers& trackers) noexcept;
  // Under the hold: the streams of ctx_ filed in the trackers' sets.
  void note_streams(detail::Trackers& trackers) noexcept;
  bool has_filed(const GpuTracker& t) const noexcept;

  CUcontext ctx_;
  detail::Trackers* trackers_ = nullptr;  // all locked while set
  // Trackers whose new waits this holds off (GpuTracker::ending_).
  std::array<bool, shm::kMaxGpus> waits_held_{};
  // (tracker, stream) of the context, filed when the call began.
  struct Filed {
    GpuTracker* tracker;
    CUstream stream;
  };
  std::array<Filed, shm::kMaxGpus*(BatchStreams::kCapacity + 1)> filed_{};
  std::size_t filed_count_ = 0;
};
// How long a context's end waits for the gate's waits on its events: they end
// when the front batch completes, which the queue bound keeps to milliseconds
// (a kernel longer than that, to its length). Past it (work that does not
// complete), the end goes on, and a wait still under way may see its event
// destroyed.
inline constexpr std::uint64_t kContextEndWaitNs = 10'000'000'000;
// Whether this thread is in the driver's end of a context under a
// ContextEnding: the gate leaves the syncs, queries, stream destroys and
// context ends it makes meanwhile alone (a driver callback's, which would
// wait for a lock this thread holds). Its launches are not left alone.
bool ending_a_context() noexcept;
// Before the application's cuStreamDestroy(stream) is forwarded.
void streams_destroying(CUstream stream) noexcept;
// Around the application's synchronisation, for the GPU of the current
// context. Returns the tracker to call after_sync() on (null: none).
GpuTracker* syncing(CUstream stream, SyncScope scope) noexcept;
// Before the application's query of its work (cuStreamQuery, cuEventQuery),
// for the GPU of the current context: the tracker to call after_poll() on
// (null: none) and the launch count it saw.
struct Polling {
  GpuTracker* tracker = nullptr;
  std::uint64_t launches = 0;
};
Polling polling(CUstream stream, SyncScope scope) noexcept;

}  // namespace cushare::shim::gate
