#include "shim/gate/tracker.hpp"

#include <sys/prctl.h>
#include <time.h>

#include <array>
#include <cstdlib>
#include <limits>

#include "shim/accounting/capture_tracker.hpp"
#include "shim/accounting/memory_quiescence.hpp"
#include "shim/driver/real_driver.hpp"
#include "shim/gate/beside_queue.hpp"
#include "shim/gate/clock.hpp"
#include "shim/gate/launch_gate.hpp"
#include "shim/gate/spell_wait.hpp"
#include "shim/gate/tsc_clock.hpp"
#include "shim/process/allocation_state.hpp"
#include "shm/clock.hpp"
#include "shm/futex.hpp"
#include "shm/process_slots.hpp"

namespace cushare::shim::gate {

std::atomic<detail::Trackers*> detail::g_trackers{nullptr};

// Never destroyed: poller threads may still be running while the process
// runs its exit handlers.
namespace {
void publish_unrecorded_launches_at_exit() {
  if (detail::Trackers* t = detail::g_trackers.load(std::memory_order_acquire))
    for (auto& tracker : *t) tracker.publish_unrecorded_launches();
}
}  // namespace

detail::Trackers& detail::create_trackers() noexcept {
  static auto* t = [] {
    auto* made = new Trackers();
    for (unsigned g = 0; g < made->size(); ++g) (*made)[g].bind_gpu(g);
    std::atexit(publish_unrecorded_launches_at_exit);
    return made;
  }();
  g_trackers.store(t, std::memory_order_release);
  return *t;
}

namespace {
// The gate's own waits and queries on an application thread, while a
// capture may be under way: the driver prohibits a thread in the default
// (global) interaction mode from such calls while another thread captures
// in the global mode (CUDA graphs as frameworks capture them), and
// invalidates that capture. The gate's calls touch only its own events, so
// they are made in the relaxed mode, as the poller's always are.
class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(bool needed) noexcept {
    const RealDriver& r = real();
    if (!needed || !r.cuThreadExchangeStreamCaptureMode) return;
    mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
    exchanged_ = r.cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCaptureMode() {
    if (exchanged_) real().cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool exchanged_ = false;
};

void store_max(std::atomic<std::uint64_t>& word, std::uint64_t value) noexcept {
  std::uint64_t cur = word.load(std::memory_order_relaxed);
  while (cur < value && !word.compare_exchange_weak(cur, value, std::memory_order_release,
                                                    std::memory_order_relaxed)) {
  }
}
}  // namespace

void reset_trackers_after_fork() noexcept {
  for (auto& t : detail::create_trackers()) t.reset_after_fork();
}

void GpuTracker::reset_after_fork() noexcept {
  // The parent's events and poller thread do not exist in the child; the
  // mutex may have been held by a parent thread at fork time.
  new (&mu_) std::mutex();
  batches_ = {};
  free_events_ = {};
  ctx_ = nullptr;
  ctx_epoch_ = 0;
  waits_out_.store(0);
  ending_ = 0;
  spell_end_ = nullptr;
  spell_end_lo_ns_ = 0;
  spell_start_ = {};
  wait_floor_ns_ = 0;
  probe_stream_ = nullptr;
  probe_ctx_ = nullptr;
  join_stream_ = nullptr;
  join_ctx_ = nullptr;
  gap_ = {};
  anchor_ = {};
  left_idle_ = false;
  idle_total_ns_ = 0;
  idle_since_ns_ = 0;
  oldest_batch_ns_.store(0);
  oldest_batch_end_.store(0);
  submitted_.store(kIdle);  // the child has a slot of its own, with no marks
  completed_.store(0);
  per_launch_ns_.store(0);
  own_per_launch_ns_.store(0);
  window_.store(kBootstrapPending);
  last_completion_ns_ = 0;
  last_completion_atomic_.store(0);
  tail_first_ns_.store(0);
  recorded_count_.store(0);
  published_launches_ = 0;
  usage_.store(nullptr);
  tail_last_ns_.store(0);
  streams_.clear();
  per_thread_.clear();
  since_record_.store(0);
  poller_started_.store(false);
  poller_idle_.store(false);
  poll_not_ready_at_.store(kNoLaunchCount);
  poll_declined_at_.store(kNoLaunchCount);
  poll_checked_ns_.store(0);
}

// Under the lock: a record under way may be naming the stream, and files
// the streams it took again when it cannot cover them.
void GpuTracker::stream_destroyed(CUstream stream) noexcept {
  {
    std::lock_guard lock(mu_);
    if (!streams_.holds(stream)) return;  // not among the batch's
    if (has_tail() && !stream_is_capturing(stream)) {
      const AllocationState* st = allocation_state();
      record_locked(stream, shm::monotonic_ns(), st ? &st->usage->gpus[gpu_] : nullptr);
      if (st) ensure_poller(st->usage->gpus[gpu_]);
    }
    // Whether or not that record covered it, no later one may name it.
    streams_.forget(stream);
  }
  // The batch just recorded is the poller's to wait for (it may sleep idle).
  if (poller_idle_.load(std::memory_order_acquire)) {
    wake_word_.fetch_add(1, std::memory_order_release);
    shm::futex_wake_all(wake_word_);
  }
}

void GpuTracker::before_sync(CUstream stream, SyncScope scope) noexcept {
  record_tail(stream, scope);
}

TailRecord GpuTracker::record_tail(CUstream stream, SyncScope scope) noexcept {
  if (!poller_started_.load(std::memory_order_acquire)) return TailRecord::kNothing;
  if (!has_tail()) return TailRecord::kNothing;
  // Another stream's tail, or one this call cannot cover, without the lock
  // (a query of an idle stream beside a busy one is common).
  const CUstream seen = streams_.tail();
  if (scope == SyncScope::kStream && seen != stream) return TailRecord::kNotHere;
  if (scope == SyncScope::kUnnamedStream &&
      (seen == BatchStreams::none() ||
       (seen == CU_STREAM_PER_THREAD && !per_thread_.only(launching_thread_id()))))
    return TailRecord::kNotHere;
  std::lock_guard lock(mu_);
  const std::uint64_t end = submitted_count();
  if (end <= recorded_count_.load(std::memory_order_relaxed)) return TailRecord::kNothing;
  CUstream tail = streams_.tail();
  if (scope == SyncScope::kStream && tail != stream) return TailRecord::kNotHere;
  // No tail (its stream was destroyed): a whole context's sync records on
  // the legacy stream and the streams filed (record_locked).
  if (tail == BatchStreams::none() && scope == SyncScope::kUnnamedStream)
    return TailRecord::kNotHere;
  if (tail == CU_STREAM_PER_THREAD) {
    // The handle means the caller's own stream: it holds the tail only if
    // the caller launched it. A whole context's sync records on the legacy
    // stream, which waits for the per-thread streams' work (and the sync for
    // every stream's). Another call records only on the caller's own stream
    // where no other thread launched on theirs (recordable_stream): on the
    // legacy stream it would put a barrier across every blocking stream.
    const bool callers =
        launch_gate_thread_last_launch_ns() == tail_last_ns_.load(std::memory_order_relaxed);
    if (scope == SyncScope::kStream && !callers) return TailRecord::kNotHere;
    if (scope == SyncScope::kUnnamedStream && !(callers && per_thread_.only(launching_thread_id())))
      return TailRecord::kNotHere;
    if (scope == SyncScope::kContext) tail = nullptr;
  }
  CUcontext current = nullptr;
  if (real().cuCtxGetCurrent) real().cuCtxGetCurrent(&current);
  // Unknown (no record yet, or its context ended): this record learns it.
  if (!current || (ctx_ && current != ctx_)) return TailRecord::kNotHere;
  if (tail != BatchStreams::none() && stream_is_capturing(tail)) return TailRecord::kCannot;
  const AllocationState* st = allocation_state();
  record_locked(tail, shm::monotonic_ns(), st ? &st->usage->gpus[gpu_] : nullptr);
  return recorded_count_.load(std::memory_order_relaxed) >= end ? TailRecord::kRecorded
                                                                : TailRecord::kCannot;
}

void GpuTracker::after_sync() noexcept {
  if (!poller_started_.load(std::memory_order_acquire)) return;
  const AllocationState* st = allocation_state();
  if (!st) return;
  complete_done_batches(st->usage->gpus[gpu_]);
}

namespace {
// This thread's queries on each GPU (poll_wait.hpp, QueryingThread): the
// launch count at its last record for a pending query, whether it queried
// again at that count before it launched, and the count at its last query
// that found work pending.
struct ThreadQueries {
  std::uint64_t recorded_at = kNoLaunchCount;
  bool waited = true;
  std::uint64_t pending_at = kNoLaunchCount;
};
thread_local std::array<ThreadQueries, shm::kMaxGpus> t_queries;
}  // namespace

std::uint64_t GpuTracker::before_poll(CUstream stream, SyncScope scope,
                                      std::uint64_t now) noexcept {
  const std::uint64_t launches = submitted_count();
  if (!poller_started_.load(std::memory_order_acquire)) return launches;  // never launched here
  const PollView view{.has_tail = has_tail(),
                      .launches = launches,
                      .not_ready_at = poll_not_ready_at_.load(std::memory_order_relaxed),
                      .declined_at = poll_declined_at_.load(std::memory_order_relaxed),
                      .tail_last_ns = tail_last_ns_.load(std::memory_order_relaxed),
                      .now_ns = now};
  if (poll_records_tail(view)) record_tail_for_poll(stream, scope, launches);
  return launches;
}

bool GpuTracker::record_tail_for_poll(CUstream stream, SyncScope scope,
                                      std::uint64_t launches) noexcept {
  const TailRecord done = record_tail(stream, scope);
  // A capture, or a record the driver refused: not tried again before the
  // next launch (a polling loop would retry at every query). A tail this
  // call cannot cover (another stream's, another thread's per-thread
  // stream, another context) may be covered by another thread's query.
  if (done == TailRecord::kCannot) poll_declined_at_.store(launches, std::memory_order_relaxed);
  return done == TailRecord::kRecorded;
}

void GpuTracker::after_poll(CUstream stream, SyncScope scope, CUresult rc,
                            std::uint64_t launches_before) noexcept {
  ThreadQueries& mine = t_queries[gpu_];
  // Queried again after its record, found pending or done: it was waiting.
  if (mine.recorded_at == launches_before) mine.waited = true;
  if (rc == CUDA_ERROR_NOT_READY) {
    if (poll_not_ready_at_.load(std::memory_order_relaxed) != launches_before)
      poll_not_ready_at_.store(launches_before, std::memory_order_relaxed);
    if (!poller_started_.load(std::memory_order_acquire)) return;
    const std::uint64_t launches = submitted_count();
    const std::uint64_t tail_last = tail_last_ns_.load(std::memory_order_relaxed);
    const PollView view{.has_tail = has_tail(),
                        .launches = launches,
                        .declined_at = poll_declined_at_.load(std::memory_order_relaxed)};
    const QueryingThread me{.made_last_launch = launch_gate_thread_last_launch_ns() == tail_last,
                            .waited_last_time = mine.waited,
                            .pending_before = mine.pending_at == launches};
    mine.pending_at = launches;
    if (pending_query_records_tail(view, me) && record_tail_for_poll(stream, scope, launches)) {
      mine.recorded_at = launches;
      mine.waited = false;
    }
    return;
  }
  // Found done: the next launch starts a new spell if the batches are
  // completed now. Only with the tail recorded (it is, once the process
  // waited by polling), and a recorded batch pending.
  if (rc != CUDA_SUCCESS || has_tail() ||
      recorded_count_.load(std::memory_order_acquire) <= completed_.load(std::memory_order_acquire))
    return;
  const std::uint64_t now = gate_now_ns();
  std::uint64_t checked = poll_checked_ns_.load(std::memory_order_relaxed);
  if (now < checked + kPollQuietNs ||
      !poll_checked_ns_.compare_exchange_strong(checked, now, std::memory_order_relaxed))
    return;
  const AllocationState* st = allocation_state();
  // Waiting for the lock: the poller, woken by the same completion, often
  // holds it, and a launch before it is done would fall inside the old spell.
  if (st) complete_done_batches(st->usage->gpus[gpu_]);
}

bool GpuTracker::complete_done_batches(shm::GpuUsage& usage) noexcept {
  std::lock_guard lock(mu_);
  // A capture begins with every tracker's lock held (RecordsHeld): none
  // begins before the queries below are made.
  const RelaxedCaptureMode relaxed(captures_active());
  bool any = false;
  while (!batches_.empty()) {
    CUevent ev = batches_.front().event;
    if (real().cuEventQuery(ev) != CUDA_SUCCESS) break;
    complete_front_locked(ev, shm::monotonic_ns(), usage);
    any = true;
  }
  return any;
}

namespace {
// The tracker of the current context's GPU, if this process launched at all.
GpuTracker* current_tracker() noexcept {
  if (!detail::g_trackers.load(std::memory_order_acquire)) return nullptr;  // nothing launched
  if (ending_a_context()) return nullptr;  // a driver callback's call: the lock is this thread's
  const AllocationState* st = allocation_state();
  if (!st) return nullptr;
  const unsigned gpu = st->device_count == 1 ? st->gpu_of_device[0] : current_gpu_index(*st);
  if (gpu >= shm::kMaxGpus) return nullptr;
  return &tracker(gpu);
}
}  // namespace

GpuTracker* syncing(CUstream stream, SyncScope scope) noexcept {
  GpuTracker* tr = current_tracker();
  if (tr) tr->before_sync(stream, scope);
  return tr;
}

Polling polling(CUstream stream, SyncScope scope) noexcept {
  GpuTracker* tr = current_tracker();
  if (!tr) return {};
  return {.tracker = tr, .launches = tr->before_poll(stream, scope, gate_now_ns())};
}

void GpuTracker::launch_failed() noexcept {
  if (!busy() || pending_launches() != 0) return;
  std::lock_guard lock(mu_);
  if (batches_.empty() && !has_tail()) settle_idle_locked();
}

// A thread ending a context holds every lock already (a driver callback's
// capture): nothing to hold again. Otherwise the trackers are made if none
// exist yet: a thread's first launch may make them while a capture begins,
// and must find the capture counted (or begin before it) when it looks,
// under a tracker's lock.
RecordsHeld::RecordsHeld() noexcept
    : trackers_(ending_a_context() ? nullptr : &detail::create_trackers()) {
  if (trackers_)
    for (auto& t : *trackers_) t.mu_.lock();
}

RecordsHeld::~RecordsHeld() {
  if (trackers_)
    for (auto it = trackers_->rbegin(); it != trackers_->rend(); ++it) it->mu_.unlock();
}

void streams_destroying(CUstream stream) noexcept {
  if (!detail::g_trackers.load(std::memory_order_acquire) || ending_a_context()) return;
  for (auto& t : detail::create_trackers()) t.stream_destroyed(stream);
}

void GpuTracker::begin_tail(std::uint64_t now) noexcept {
  std::uint64_t expected = 0;
  if (tail_first_ns_.compare_exchange_strong(expected, now, std::memory_order_acq_rel) &&
      poller_idle_.load(std::memory_order_acquire)) {
    // Idle -> busy: the poller must look after this tail (one wake per
    // transition, not per launch).
    wake_word_.fetch_add(1, std::memory_order_release);
    shm::futex_wake_all(wake_word_);
  }
}

void GpuTracker::end_batch(CUstream stream, std::uint64_t now, shm::GpuUsage& usage) noexcept {
  if (stream_is_capturing(stream)) return;  // never record into a capture
  {
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;  // another thread is recording right now
    record_locked(stream, now, &usage);
  }
  ensure_poller(usage);
  if (poller_idle_.load(std::memory_order_acquire)) {
    wake_word_.fetch_add(1, std::memory_order_release);
    shm::futex_wake_all(wake_word_);
  }
}

// The per-thread default stream's handle names the recording thread's own
// stream, and a batch may hold other threads' launches on theirs: unless
// the recording thread alone ever launched there, the event goes on the
// legacy stream, which waits for them all (a barrier across the blocking
// streams: the thread's later work then waits for a long kernel on any of
// them). Read after the launch count the record covers (per_thread_stream.hpp).
CUstream GpuTracker::recordable_stream(CUstream stream) const noexcept {
  if (stream != CU_STREAM_PER_THREAD || per_thread_.only(launching_thread_id())) return stream;
  return nullptr;
}

void GpuTracker::record_locked(CUstream stream, std::uint64_t now, shm::GpuUsage* usage) noexcept {
  const std::uint64_t end = submitted_count();
  if (end <= recorded_count_.load(std::memory_order_relaxed)) return;  // nothing unrecorded
  std::uint64_t first = tail_first_ns_.load(std::memory_order_acquire);
  const std::uint64_t tail_first = first;
  if (first == 0) first = tail_last_ns_.load(std::memory_order_relaxed);
  if (first == 0) first = now;
  const RealDriver& r = real();
  // The first record (and the first after a context's end) learns the
  // context the batches are in: the recording thread's, once a record made
  // there succeeded (an event is made in the current context, and records
  // only on a stream of it).
  CUcontext current = nullptr;
  if (!ctx_ && r.cuCtxGetCurrent) r.cuCtxGetCurrent(&current);
  if (usage) {
    // The launches count whether or not the record below succeeds: a tail
    // left unrecorded at the process's exit would lose them otherwise.
    usage->launches.fetch_add(end - published_launches_, std::memory_order_relaxed);
    published_launches_ = end;
  }
  // Where another thread launched on its per-thread stream, the event goes
  // on the legacy stream (recordable_stream). Checked again here, under the
  // lock that the beginning of a capture holds (RecordsHeld): no record is
  // made into a capture, and none on the legacy stream while a blocking
  // stream is being captured (it is unusable then).
  stream = recordable_stream(stream);
  if (stream != BatchStreams::none() && stream_is_capturing(stream)) return;
  // The batch's other streams, taken after `end` was read (batch_streams.hpp).
  const BatchStreams::Taken left = streams_.take();
  std::array<CUstream, BatchStreams::kCapacity + 3> on{};
  std::size_t count = 0;
  BatchStreams::Taken capturing;  // left out now, covered once their capture ends
  const auto cover = [&](CUstream s) {
    s = recordable_stream(s);
    if (std::find(on.begin(), on.begin() + count, s) != on.begin() + count) return;
    if (stream_is_capturing(s)) {
      if (capturing.count < capturing.streams.size()) capturing.streams[capturing.count++] = s;
      return;
    }
    on[count++] = s;
  };
  // First the stream a record on one stream goes on: the named one, else
  // the legacy stream (the tail's was destroyed; the poller records there).
  if (stream != BatchStreams::none()) on[count++] = stream;
  for (std::size_t i = 0; i < left.count; ++i) cover(left.streams[i]);
  // The legacy stream also waits for the blocking streams the set could not keep.
  if (count == 0 || left.overflowed) cover(nullptr);
  // No join while a capture is under way anywhere in the process: a stream
  // can join a capture by waiting on a captured event (not hooked), and a
  // record on it would draw the join stream into the capture, which the
  // application's end of the capture then finds unjoined.
  CUevent ev = count > 1 && !captures_active() ? record_joined_locked(on.data(), count) : nullptr;
  const bool joined = ev != nullptr;
  if (!ev && count > 0) ev = record_event_locked(on[0]);
  // Not joined (one stream, another context, a failed record): the streams
  // taken, but the one recorded on, wait for a record that covers them.
  if (!joined) {
    streams_.put_back(left, ev ? on[0] : BatchStreams::none());
  } else {
    streams_.put_back(capturing, BatchStreams::none());
  }
  if (!ev) return;
  if (!ctx_) ctx_ = current;
  batches_.push_back({.event = ev,
                      .end_count = end,
                      .first_submit_ns = first,
                      .last_submit_ns = tail_last_ns_.load(std::memory_order_relaxed),
                      .several_streams = joined,
                      .launches = end - recorded_count_.load(std::memory_order_relaxed),
                      .stream = joined                      ? BatchStreams::none()
                                : on[0] == CU_STREAM_LEGACY ? nullptr
                                                            : on[0],
                      .non_blocking = !joined && non_blocking(on[0])});
  if (batches_.size() == 1) {
    oldest_batch_end_.store(end, std::memory_order_relaxed);
    oldest_batch_ns_.store(first, std::memory_order_release);
  }
  recorded_count_.store(end, std::memory_order_release);
  // Per-batch publication for the daemon and metrics: when the work
  // submitted so far should be done (see GpuUsage).
  if (usage) publish_expected_drain(now, *usage);
  // A launch racing this record keeps its own tail mark (the CAS fails);
  // either way the counts, not this mark, decide what is pending.
  std::uint64_t expected = tail_first;
  if (tail_first != 0)
    tail_first_ns_.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
  since_record_.store(0, std::memory_order_relaxed);
  last_record_ns_.store(now, std::memory_order_relaxed);
}

// 0 until the first batch completed: without a per-launch figure there is no
// estimate, and the daemon then waits for the drain it sees (it takes a lease
// back on a passed estimate, docs/scheduler.md "A holder whose threads starve").
void GpuTracker::publish_expected_drain(std::uint64_t now, shm::GpuUsage& usage) const noexcept {
  const bool known = per_launch_ns_.load(std::memory_order_relaxed) != 0;
  usage.expected_drain_ns.store(known ? now + queued_estimate_ns(now, kQueueHorizonNs) : 0,
                                std::memory_order_relaxed);
}

// Timing is enabled (batches are recorded once per 250 us of submissions,
// so its cost is off the launch path): the last batch event of a spell marks
// on the GPU's clock where an idle gap began.
// A pooled event the driver refuses belongs to a context that is gone (a
// primary context reset, a destroyed context), and so do the rest of the
// pool: all are destroyed, and one fresh event is tried.
CUevent GpuTracker::record_event_locked(CUstream stream) noexcept {
  const RealDriver& r = real();
  const bool pooled = !free_events_.empty();
  CUevent ev = take_event_locked();
  if (!ev) return nullptr;
  if (r.cuEventRecord(ev, stream) == CUDA_SUCCESS) return ev;
  // A waiter outside the lock may hold a pooled handle (its batch completed
  // by another thread and the event recycled): while one may, the stale
  // events are dropped, not destroyed.
  const bool destroy = !pooled || waits_out_.load(std::memory_order_acquire) == 0;
  if (destroy) r.cuEventDestroy_v2(ev);
  if (!pooled) return nullptr;
  if (destroy)
    for (CUevent stale : free_events_) r.cuEventDestroy_v2(stale);
  free_events_.clear();
  ev = take_event_locked();
  if (ev && r.cuEventRecord(ev, stream) == CUDA_SUCCESS) return ev;
  if (ev) r.cuEventDestroy_v2(ev);
  return nullptr;
}

// The events on the streams go back to the pool once waited for: a wait
// holds the record made before it, whatever the event records next. The
// first stream's record must succeed (through the pool's stale-context
// check); another's that the driver refuses (a stream of another context)
// leaves that stream uncovered, and its event in the pool.
CUevent GpuTracker::record_joined_locked(const CUstream* streams, std::size_t count) noexcept {
  const RealDriver& r = real();
  const CUstream join = join_stream_locked();
  if (!join) return nullptr;
  // A stream whose record fails for another reason than belonging to
  // another context is filed again for the next record.
  BatchStreams::Taken retry;
  const auto record_other = [&](CUstream stream) -> CUevent {
    CUevent ev = take_event_locked();
    const CUresult rc = ev ? r.cuEventRecord(ev, stream) : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) return ev;
    if (ev) release_locked(ev);
    if (rc != CUDA_ERROR_INVALID_HANDLE && rc != CUDA_ERROR_INVALID_CONTEXT &&
        retry.count < retry.streams.size())
      retry.streams[retry.count++] = stream;
    return nullptr;
  };
  // A join stream the driver no longer knows belonged to a context that is
  // gone: the next batch of several streams makes another. Not asked while a
  // capture is under way, where a query could invalidate another thread's.
  const auto drop_if_stale = [&] {
    if (captures_active()) return;
    const CUresult q = r.cuStreamQuery(join);
    if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY) {
      join_stream_ = nullptr;
      join_ctx_ = nullptr;
    }
  };
  for (std::size_t i = 0; i < count; ++i) {
    CUevent ev = i == 0 ? record_event_locked(streams[0]) : record_other(streams[i]);
    if (!ev) {
      if (i == 0) return nullptr;  // the caller's record on it fails too
      continue;                    // that stream's work is not covered
    }
    const bool waited = r.cuStreamWaitEvent(join, ev, 0) == CUDA_SUCCESS;
    release_locked(ev);
    if (!waited && i == 0) {
      drop_if_stale();
      return nullptr;
    }
  }
  CUevent ev = record_event_locked(join);
  if (!ev) drop_if_stale();
  if (ev) streams_.put_back(retry, BatchStreams::none());
  return ev;
}

// Only in the context the batches are tracked in (ctx_): a process that
// launches in several contexts on the GPU gets single-stream records in the
// others. Not made while a capture is under way anywhere in the process.
CUstream GpuTracker::join_stream_locked() noexcept {
  const RealDriver& r = real();
  CUcontext current = nullptr;
  if (r.cuCtxGetCurrent(&current) != CUDA_SUCCESS || !current || current != ctx_) return nullptr;
  if (join_stream_ && join_ctx_ == current) return join_stream_;
  if (captures_active()) return nullptr;
  CUstream made = nullptr;
  if (r.cuStreamCreate(&made, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return nullptr;
  join_stream_ = made;
  join_ctx_ = current;
  return made;
}

CUevent GpuTracker::take_event_locked() noexcept {
  CUevent ev = nullptr;
  if (!free_events_.empty()) {
    ev = free_events_.back();
    free_events_.pop_back();
  } else if (real().cuEventCreate(&ev, CU_EVENT_BLOCKING_SYNC) != CUDA_SUCCESS) {
    return nullptr;
  }
  return ev;
}

void GpuTracker::begin_spell(CUstream stream, shm::GpuUsage& usage, bool probe_wait) noexcept {
  const std::uint32_t epoch = mark_busy();
  std::lock_guard lock(mu_);
  // Before `to` is recorded: the GPU cannot reach it earlier.
  const std::uint64_t begun = shm::monotonic_ns();
  const std::uint64_t since = std::exchange(idle_since_ns_, 0);
  const bool counted = since != 0 && epoch != 0 && epoch == idle_epoch_ + 1 && begun > since;
  if (counted) idle_total_ns_ += begun - since;
  CUevent from = std::exchange(spell_end_, nullptr);
  const std::uint64_t from_lo = std::exchange(spell_end_lo_ns_, 0);
  if (!from) return;
  // Only a gap in which no process of the allocation had work on the GPU
  // counts: this process left it idle, and is the next to make it busy.
  if (epoch == 0 || epoch != idle_epoch_ + 1 || gap_.from || !real().cuEventElapsedTime_v2 ||
      stream_is_capturing(stream)) {
    release_locked(from);
    return;
  }
  CUevent to = record_event_locked(stream);
  if (!to) {
    release_locked(from);
    return;
  }
  // A lease is charged from its first launch (resumed_ns): a gap that began
  // before it (waiting for the lease, or before the lease) was not charged,
  // so only its part after that instant is idle time of this lease.
  const std::uint64_t now = shm::monotonic_ns();
  const std::uint64_t resumed = usage.resumed_ns.load(std::memory_order_acquire);
  gap_ = {.from = from,
          .to = to,
          .clip_ns = now > resumed ? now - resumed : 0,
          .start = probe_wait ? record_start_probe_locked() : nullptr,
          .begun_ns = begun,
          .from_lo_ns = from_lo,
          .counted_from_ns = counted ? since : 0};
  // Seen complete at once, the probe bounds the last spell's end from above
  // (settle_gap_locked, unseen_idle_ns); one query per spell. Not while
  // another thread may capture in the global mode, where a query from this
  // thread would invalidate its capture.
  if (gap_.start && !captures_active() && real().cuEventQuery(gap_.start) == CUDA_SUCCESS)
    gap_.start_seen_ns = shm::monotonic_ns();
}

// Only in the context the probe stream was made in (the first spell's): a
// process that launches in several contexts on the GPU gets no probe in the
// others, rather than a stream per context or events recorded across them.
CUevent GpuTracker::record_start_probe_locked() noexcept {
  const RealDriver& r = real();
  CUcontext current = nullptr;
  if (r.cuCtxGetCurrent(&current) != CUDA_SUCCESS || !current) return nullptr;
  if (!probe_stream_) {
    if (r.cuStreamCreate(&probe_stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      probe_stream_ = nullptr;
      return nullptr;
    }
    probe_ctx_ = current;
  }
  if (current != probe_ctx_) return nullptr;
  CUevent ev = record_event_locked(probe_stream_);
  if (!ev) {
    // A stream the driver no longer knows belonged to a context that is
    // gone: the next spell makes one in the context current then. One it
    // knows is kept (the event was the problem), never leaked.
    const RelaxedCaptureMode relaxed(captures_active());
    const CUresult q = r.cuStreamQuery(probe_stream_);
    if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY) {
      probe_stream_ = nullptr;
      probe_ctx_ = nullptr;
    }
  }
  return ev;
}

// Publishes a measured gap once its events completed (the GPU reached the
// first launch after it), and counts the spell's wait for the GPU as idle
// time of the local duty cycle (spell_wait_locked). `completed`: the batch
// event just completed.
void GpuTracker::settle_gap_locked(shm::GpuUsage& usage, CUevent completed) noexcept {
  if (!gap_.from) return;
  if (gap_.start && !gap_.start_lagged) {
    float after = 0;
    const CUresult q = completed ? real().cuEventElapsedTime_v2(&after, gap_.start, completed)
                                 : CUDA_ERROR_INVALID_HANDLE;
    // Not lagged only where the GPU's clock says so: a batch in another
    // context (an error here) may have run before the probe's context did.
    gap_.start_lagged = q != CUDA_SUCCESS || after < 0;
  }
  float ms = 0;
  const CUresult rc = real().cuEventElapsedTime_v2(&ms, gap_.from, gap_.to);
  if (rc == CUDA_ERROR_NOT_READY) return;
  float ms_start = 0;
  CUresult rc_start = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS && gap_.start) {
    rc_start = real().cuEventElapsedTime_v2(&ms_start, gap_.from, gap_.start);
    if (rc_start == CUDA_ERROR_NOT_READY) return;
  }
  const GapProbe done = std::exchange(gap_, {});
  if (rc == CUDA_SUCCESS && ms > 0) {
    const auto gap = static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6);
    usage.idle_ns.fetch_add(std::min(gap, done.clip_ns), std::memory_order_relaxed);
  }
  if (rc_start == CUDA_SUCCESS && ms_start >= 0) {
    const auto gap = static_cast<std::uint64_t>(static_cast<double>(ms_start) * 1e6);
    const std::uint64_t started = completed_no_earlier_than(done.begun_ns, done.from_lo_ns, gap);
    if (done.begun_ns >= wait_floor_ns_ && !done.start_lagged)
      idle_total_ns_ += spell_wait_locked(done, started);
    // Only this period's part (an earlier period's budget was settled), and
    // only where no sibling process can have run before the end was seen
    // (as for the wait).
    if (const std::uint64_t unseen = unseen_idle_ns(done.counted_from_ns, done.start_seen_ns, gap,
                                                    std::max(done.from_lo_ns, wait_floor_ns_));
        unseen != 0 && alone_in_allocation())
      idle_total_ns_ += unseen;
    const CUevent old = std::exchange(spell_start_, {.event = done.start, .lo_ns = started}).event;
    release_locked(old);
  }
  release_locked(done.from);
  release_locked(done.to);
  release_locked(done.start);  // kept as the spell's start
}

// The wait counts only where nothing of the allocation can have run in it:
// no other process is attached to the allocation (a sibling that ran while
// this one waited leaves no other trace once it is idle again), and the
// probe completed before every batch of the spell that completed before it
// settled (it did not lag behind the spell's own work: settle_gap_locked).
std::uint64_t GpuTracker::spell_wait_locked(const GapProbe& done, std::uint64_t started) noexcept {
  const std::uint64_t wait = spell_wait_ns(done.begun_ns, started);
  return wait != 0 && alone_in_allocation() ? wait : 0;
}

bool GpuTracker::alone_in_allocation() noexcept {
  const AllocationState* st = allocation_state();
  if (!st || !st->slot) return false;
  for (std::uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    if (i != st->slot_index && st->usage->slots[i].state.load(std::memory_order_acquire) !=
                                   static_cast<std::uint32_t>(shm::SlotState::kFree))
      return false;
  }
  return true;
}

void GpuTracker::release_locked(CUevent ev) noexcept {
  if (!ev || ev == spell_end_ || ev == gap_.from || ev == gap_.to || ev == gap_.start ||
      ev == anchor_.event || ev == spell_start_.event)
    return;
  free_events_.push_back(ev);
}

bool GpuTracker::completed_before_anchor_locked(CUevent ev) noexcept {
  float ms = 0;
  return anchor_.event && last_completion_ns_ != 0 && real().cuEventElapsedTime_v2 &&
         real().cuEventElapsedTime_v2(&ms, anchor_.event, ev) == CUDA_SUCCESS && ms < 0;
}

// The GPU completes an event no later than it is seen complete, and no later
// than a completed event before it plus the time between the two on the
// GPU's clock: the tighter of the two bounds is when the batch completed. So
// a poller that wakes late (a loaded host) neither charges its lateness to
// the lease nor inflates the per-launch estimate. The chain of bounds starts
// afresh every kAnchorSpanNs, so the drift between the GPU's clock and
// CLOCK_MONOTONIC stays negligible.
std::uint64_t GpuTracker::completed_at_locked(CUevent ev, std::uint64_t seen_ns,
                                              std::uint64_t recorded_ns) noexcept {
  std::uint64_t at = seen_ns;
  float ms = 0;
  if (anchor_.event && seen_ns < anchor_.since_ns + kAnchorSpanNs && real().cuEventElapsedTime_v2 &&
      real().cuEventElapsedTime_v2(&ms, anchor_.event, ev) == CUDA_SUCCESS && ms >= 0) {
    at = std::min(seen_ns,
                  anchor_.at_ns + static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6));
  } else {
    anchor_.since_ns = seen_ns;
  }
  // Recorded after its batch's last submission: it cannot have completed before.
  at = std::max(at, std::min(recorded_ns, seen_ns));
  const CUevent old = std::exchange(anchor_.event, ev);
  anchor_.at_ns = at;
  release_locked(old);
  return at;
}

void GpuTracker::ensure_poller(shm::GpuUsage& usage) noexcept {
  if (poller_started_.load(std::memory_order_acquire)) return;
  bool expected = false;
  if (!poller_started_.compare_exchange_strong(expected, true)) return;
  usage_.store(&usage, std::memory_order_release);
  try {
    std::thread([this, u = &usage] { poll_loop(u); }).detach();
  } catch (...) {
    poller_started_.store(false);
  }
}

void GpuTracker::publish_unrecorded_launches() noexcept {
  shm::GpuUsage* usage = usage_.load(std::memory_order_acquire);
  if (!usage) return;
  // Other threads still run during exit; one of them may hold the lock for
  // a moment, none for long.
  std::unique_lock lock(mu_, std::defer_lock);
  for (int i = 0; i < 100 && !lock.try_lock(); ++i) {
    timespec ts{.tv_sec = 0, .tv_nsec = 100'000};
    nanosleep(&ts, nullptr);
  }
  if (!lock.owns_lock()) return;
  const std::uint64_t end = submitted_count();
  if (end > published_launches_) {
    usage->launches.fetch_add(end - published_launches_, std::memory_order_relaxed);
    published_launches_ = end;
  }
}

void GpuTracker::publish_drained(std::uint64_t value, shm::GpuUsage& usage) noexcept {
  store_max(usage.drained_ns, value);
}

std::uint32_t GpuTracker::mark_busy() noexcept {
  std::uint32_t epoch = 0;
  if (const AllocationState* st = allocation_state(); st && st->slot) {
    if (shm::mark_busy(*st->usage, *st->slot, gpu_))
      epoch = st->usage->gpus[gpu_].busy_epoch.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  submitted_.fetch_and(~kIdle, std::memory_order_seq_cst);
  return epoch;
}

// Everything this process submitted has completed: it leaves the busy count
// (unless a launch slipped in meanwhile). Returns whether it is still idle.
bool GpuTracker::settle_idle_locked() noexcept {
  if (busy()) {
    const AllocationState* st = allocation_state();
    left_idle_ = st && st->slot && shm::clear_busy(*st->usage, *st->slot, gpu_);
    if (left_idle_) idle_epoch_ = st->usage->gpus[gpu_].busy_epoch.load(std::memory_order_acquire);
    const std::uint64_t before = submitted_.fetch_or(kIdle, std::memory_order_seq_cst);
    if ((before & ~kIdle) != completed_.load(std::memory_order_acquire)) {
      mark_busy();  // a launch got past the gate while we cleared
      return false;
    }
  }
  return pending_launches() == 0;
}

namespace {
// GpuUsage::per_launch_us of a figure in nanoseconds (rounded up).
std::uint32_t per_launch_us_of(std::uint64_t per_ns) noexcept {
  return static_cast<std::uint32_t>(
      std::min<std::uint64_t>((per_ns + 999) / 1000, std::numeric_limits<std::uint32_t>::max()));
}
}  // namespace

void GpuTracker::sample_per_launch_locked(std::uint64_t launches, std::uint64_t span_ns,
                                          bool may_raise, shm::GpuUsage& usage) noexcept {
  // At least 1 ns: 0 means "not measured yet" to the queue estimate, and
  // kernels that take next to no GPU time (more launches than
  // nanoseconds in a batch) must not look unmeasured for ever.
  const std::uint64_t sample = std::max<std::uint64_t>(span_ns / launches, 1);
  const std::uint64_t old = per_launch_ns_.load(std::memory_order_relaxed);
  const bool significant =
      may_raise && (launches >= kSignificantBatch || span_ns >= kRecordIntervalNs);
  if (old == 0 || significant || sample < old)
    per_launch_ns_.store(next_per_launch_ns(old, sample, significant), std::memory_order_relaxed);
  // A cut lease is weighed by the figure with the siblings' time slices
  // taken out (own_launch_sample_ns), times the processes that have work in
  // flight when it is weighed (cut_per_launch_ns): those the launch would
  // share the GPU with (the long kernels' gates keep them out of it).
  // Weighed by the inflated figure, the daemon took the allocation for one
  // without short kernels and held the GPU idle through another tenant's
  // short gaps rather than cut a lease for it, and the short kernels, never
  // run alone again, kept the inflated figure.
  const std::uint64_t own_sample =
      own_launch_sample_ns(sample, usage.busy_processes.load(std::memory_order_relaxed));
  const std::uint64_t own = own_per_launch_ns_.load(std::memory_order_relaxed);
  // Published at every batch that may move it: an allocation's processes
  // publish theirs in turn (the daemon looks for short kernels among them).
  if (own == 0 || significant || own_sample < own) {
    const std::uint64_t per = next_per_launch_ns(own, own_sample, significant);
    own_per_launch_ns_.store(per, std::memory_order_relaxed);
    usage.per_launch_us.store(per_launch_us_of(per), std::memory_order_relaxed);
  }
}

void GpuTracker::complete_front_locked(CUevent ev, std::uint64_t seen_ns,
                                       shm::GpuUsage& usage) noexcept {
  if (batches_.empty() || batches_.front().event != ev) return;  // someone else did it
  const Batch done = batches_.front();
  batches_.pop_front();
  // A batch that completed on the GPU before the one completed last (its
  // stream ran beside a long kernel of an older batch) is done no later
  // than that one, and gives no point on the GPU's clock to chain from: the
  // anchor, and a spell's end, stay with the older one (dated by its own
  // event, the next spell's idle gap would count the long kernel's last
  // stretch as idle).
  const bool early = completed_before_anchor_locked(ev);
  const std::uint64_t now = early ? std::min(last_completion_ns_, seen_ns)
                                  : completed_at_locked(ev, seen_ns, done.last_submit_ns);
  const CUevent timeline = early ? anchor_.event : ev;
  // GPU time of the batch: from when the GPU could start it (its first
  // submission, or the previous batch's completion) to its completion.
  const std::uint64_t prev_end = completed_.load(std::memory_order_relaxed);
  const std::uint64_t launches = done.end_count > prev_end ? done.end_count - prev_end : 0;
  const std::uint64_t began = std::max(done.first_submit_ns, last_completion_ns_);
  // Nor a measure of its work from that completion on: a batch seen done
  // while an older one ran gave its sample then (beside_oldest_allows_locked).
  if (launches > 0 && now > began && !early && !done.seen_done)
    sample_per_launch_locked(launches, now - began, true, usage);
  last_completion_ns_ = now;
  last_completion_atomic_.store(now, std::memory_order_relaxed);
  const std::uint64_t window = window_.load(std::memory_order_relaxed);
  if (window < kMaxWindow) window_.store(window * 2, std::memory_order_relaxed);
  completed_.store(std::max(prev_end, done.end_count), std::memory_order_release);
  oldest_batch_end_.store(batches_.empty() ? 0 : batches_.front().end_count,
                          std::memory_order_relaxed);
  oldest_batch_ns_.store(batches_.empty() ? 0 : batches_.front().first_submit_ns,
                         std::memory_order_release);
  // Wake the launching threads only now that the counts say what completed:
  // woken earlier, one re-checks the queue against the old counts, finds it
  // still too long and sleeps for its whole timeout with nothing left to
  // complete (the GPU idles, and the daemon takes the lease back as idle).
  progress_word_.fetch_add(1, std::memory_order_release);
  if (progress_waiters_.load(std::memory_order_acquire) > 0) shm::futex_wake_all(progress_word_);
  // This process's marks: everything it submitted up to the batch's last
  // launch has completed; if nothing else is pending, everything up to now
  // (the daemon reads them for the allocation only while no other process
  // of it is busy on the GPU).
  left_idle_ = false;
  const bool idle = batches_.empty() && !has_tail() && settle_idle_locked();
  publish_drained(idle ? now : done.last_submit_ns, usage);
  // Before the spell's end below: a spell of one batch ends at its start's
  // settling, and its end's bound chains from that start.
  settle_gap_locked(usage, ev);  // its lag check wants the earliest completion
  if (idle && left_idle_) {
    float ms_since_start = 0;
    // The spell ended with this event: an idle gap begins here on the GPU.
    release_locked(std::exchange(spell_end_, timeline));
    idle_since_ns_ = now;
    // The submission stamps come from the gate's counter clock, which may
    // run up to tsc::kMaxAnchorErrorNs ahead of CLOCK_MONOTONIC unnoticed.
    const std::uint64_t submitted = done.last_submit_ns > tsc::kMaxAnchorErrorNs
                                        ? done.last_submit_ns - tsc::kMaxAnchorErrorNs
                                        : 0;
    spell_end_lo_ns_ = submitted;
    if (spell_start_.event && real().cuEventElapsedTime_v2 &&
        real().cuEventElapsedTime_v2(&ms_since_start, spell_start_.event, timeline) ==
            CUDA_SUCCESS &&
        ms_since_start >= 0)
      spell_end_lo_ns_ = completed_no_earlier_than(
          submitted, spell_start_.lo_ns,
          static_cast<std::uint64_t>(static_cast<double>(ms_since_start) * 1e6));
  }
  release_locked(ev);  // kept while a role above (or the anchor) holds it
}

std::uint64_t GpuTracker::idle_at_period_start_ns(std::uint64_t open) noexcept {
  {
    std::lock_guard lock(mu_);
    wait_floor_ns_ = std::max(wait_floor_ns_, open);
  }
  return idle_until_ns(open);
}

std::uint64_t GpuTracker::idle_until_ns(std::uint64_t t) noexcept {
  std::lock_guard lock(mu_);
  std::uint64_t idle = idle_total_ns_;
  if (idle_since_ns_ != 0 && t > idle_since_ns_) {
    // Still ours only while no process made the allocation busy since.
    const AllocationState* st = allocation_state();
    if (st && st->usage->gpus[gpu_].busy_epoch.load(std::memory_order_acquire) == idle_epoch_)
      idle += t - idle_since_ns_;
  }
  return idle;
}

// The queue estimate takes the oldest batch's launches to run one after
// another, and a batch over several streams completes with the slowest: a
// long kernel on one stream would hold the launches on every other until it
// ended, though they would run beside it (and a kernel that waits for work
// launched later on another stream would never end). So would a long
// kernel's batch on its stream alone (recorded so when its process launched
// nothing else for a while). A launch whose stream has nothing queued
// starts at once beside it, and one whose stream caught up with it keeps up
// to the lease's queue of its own behind it: it goes. The legacy stream's
// launches too, where the long kernel is on a non-blocking stream (its own
// batches then complete beside it). A launch that would run after the
// oldest batch waits for it (looks_beside: its own stream's, the legacy
// stream behind a blocking stream's, a blocking one behind the legacy
// stream's, a per-thread one behind a per-thread one's).
bool GpuTracker::beside_oldest_locked(CUstream stream) const noexcept {
  if (batches_.empty()) return false;
  const Batch& oldest = batches_.front();
  const bool legacy = stream == nullptr || stream == CU_STREAM_LEGACY;
  return looks_beside(oldest.several_streams, oldest.stream, oldest.non_blocking, stream,
                      legacy ? nullptr : recordable_stream(stream),
                      [&] { return non_blocking(stream); });
}

bool GpuTracker::beside_oldest_allows_locked(CUstream stream, std::uint64_t beside_ns,
                                             shm::GpuUsage& usage) noexcept {
  if (beside_ns == 0 || !beside_oldest_locked(stream) || stream_is_capturing(stream)) return false;
  const RelaxedCaptureMode relaxed(captures_active());
  const RealDriver& r = real();
  // A per-thread default stream's batches are recorded on the legacy stream
  // where other threads launched on theirs (recordable_stream), and that
  // record completes only once every blocking stream's earlier work has:
  // one of them done says the thread's stream caught up.
  const bool legacy = stream == nullptr || stream == CU_STREAM_LEGACY;
  const CUstream own = legacy ? nullptr : recordable_stream(stream);
  const auto later = std::next(batches_.begin());
  // A batch found done here completed before the oldest one, and gives its
  // per-launch sample now: from its first submission (or the completion of
  // the one before it on its stream) to about now. Its turn at the front
  // gives none (complete_front_locked). Seen on the CPU only when a held
  // launch looks, its end may be late by a host pause: such a sample may
  // lower the figure, never raise it.
  const Batch& oldest = batches_.front();
  BesideQueue q = beside_queue(
      later, batches_.end(), oldest.several_streams ? BatchStreams::none() : oldest.stream, own,
      shm::monotonic_ns(), [&](const Batch& b) { return r.cuEventQuery(b.event) == CUDA_SUCCESS; },
      [&](const Batch& b, std::uint64_t previous_ns) {
        const std::uint64_t began = std::max(b.first_submit_ns, previous_ns);
        if (b.done_seen_ns > began)
          sample_per_launch_locked(b.launches, b.done_seen_ns - began, false, usage);
      });
  batches_.erase(merge_done_batches(later, batches_.end(), [&](CUevent ev) { release_locked(ev); }),
                 batches_.end());
  // Nothing recorded on the stream alone behind the oldest batch (this
  // launch is held, so nothing will be): a mark of no launches there, which
  // a later look finds complete once the stream caught up. On the legacy
  // stream it is a barrier for the blocking streams' later work, as the
  // held launch there will be. Not for a per-thread stream other threads
  // launched on too: on the legacy stream the mark would hold that stream's
  // later work behind every blocking stream's, which the program did not
  // ask for.
  if (!q.stream_recorded && (own != nullptr || legacy) && !stream_is_capturing(own)) {
    if (CUevent ev = record_event_locked(own)) {
      // It covers no launch: its completion says nothing of the launches
      // not recorded yet, so it publishes no later drain than the batch
      // before it (complete_front_locked).
      const std::uint64_t before = batches_.back().last_submit_ns;
      batches_.push_back({.event = ev,
                          .end_count = recorded_count_.load(std::memory_order_relaxed),
                          .first_submit_ns = before,
                          .last_submit_ns = before,
                          .stream = own,
                          .non_blocking = non_blocking(own)});
    }
  }
  // Launches not recorded yet (wait_for_progress records behind such a batch
  // only every kRecordIntervalNs) may be on any stream.
  const std::uint64_t unrecorded =
      submitted_count() - recorded_count_.load(std::memory_order_relaxed);
  q.pending += unrecorded;
  q.beside_total += unrecorded;
  if (beside_allows(q, per_launch_ns_.load(std::memory_order_relaxed), beside_ns)) return true;
  // The legacy stream idle says nothing of the blocking streams' work, which
  // a launch there would wait for.
  return !legacy && r.cuStreamQuery(stream) == CUDA_SUCCESS;
}

bool GpuTracker::non_blocking(CUstream stream) const noexcept {
  const RealDriver& r = real();
  unsigned flags = 0;
  return stream != nullptr && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD &&
         r.cuStreamGetFlags && r.cuStreamGetFlags(stream, &flags) == CUDA_SUCCESS &&
         (flags & CU_STREAM_NON_BLOCKING);
}

bool GpuTracker::wait_for_progress(CUstream stream, std::uint64_t excess_ns,
                                   std::uint64_t beside_ns, shm::GpuUsage& usage) noexcept {
  if (per_launch_ns_.load(std::memory_order_relaxed) != 0 && excess_ns > 0) {
    // Wait about as long as the GPU needs to get below the horizon, so the
    // queue never runs dry while we wait (the poller keeps the count right).
    bool beside = false;
    {
      std::lock_guard lock(mu_);
      // Behind a batch of other streams, launches go beside it one by one
      // through here: a record each would make a batch (and an event)
      // per launch while that batch runs. At the fast path's interval.
      const std::uint64_t now = shm::monotonic_ns();
      if (has_tail() && !stream_is_capturing(stream) &&
          !(beside_ns != 0 && beside_oldest_locked(stream) &&
            now < last_record_ns_.load(std::memory_order_relaxed) + kRecordIntervalNs)) {
        record_locked(stream, now, &usage);
      }
      if (beside_oldest_allows_locked(stream, beside_ns, usage)) return true;
      beside = beside_ns != 0 && beside_oldest_locked(stream);
    }
    ensure_poller(usage);
    // The poller may not have run since the GPU finished a batch (at normal
    // priority on a busy host it wakes milliseconds late), and until it does
    // the estimate counts that batch as queued, ever longer by the head rule:
    // this thread, which has the CPU now, looks for itself.
    const std::uint32_t seen = progress_word_.load(std::memory_order_acquire);
    if (complete_done_batches(usage)) return false;
    // Renewed on every wait: the daemon takes the lease back from a holder
    // whose thread waits here while this estimate passed (a thread starved of
    // a CPU leaves the GPU idle), and this wait ends before it passes (the
    // excess is less than the queue).
    publish_expected_drain(shm::monotonic_ns(), usage);
    // Wake on the next completed batch or after about the excess, whichever
    // comes first: an estimate that is too high never idles the GPU long.
    // Behind a batch of other streams, after about one launch (at least
    // kBesidePollNs): this stream may be done long before that batch is.
    std::uint64_t wait = excess_ns;
    if (beside)
      wait =
          std::min(wait, std::max(per_launch_ns_.load(std::memory_order_relaxed), kBesidePollNs));
    progress_waiters_.fetch_add(1, std::memory_order_acq_rel);
    shm::futex_wait(progress_word_, seen, std::clamp<std::uint64_t>(wait, 20'000, 2'000'000));
    progress_waiters_.fetch_sub(1, std::memory_order_acq_rel);
    return false;
  }
  CUevent ev = nullptr;
  bool beside = false;
  {
    std::lock_guard lock(mu_);
    if (batches_.empty() && !stream_is_capturing(stream)) {
      record_locked(stream, shm::monotonic_ns(), &usage);
    }
    if (beside_oldest_allows_locked(stream, beside_ns, usage)) return true;
    beside = beside_ns != 0 && beside_oldest_locked(stream);
    // Not while a context's end waits for the waits to be over. Not a batch
    // of other streams either: this stream may be done long before it.
    if (!batches_.empty() && ending_ == 0 && !beside) {
      ev = batches_.front().event;
      waits_out_.fetch_add(1, std::memory_order_relaxed);  // under the lock: see ContextEnding
    }
  }
  ensure_poller(usage);
  if (!ev) {
    // Only work queued into a capture (or record failed): nothing to wait
    // on. Or the oldest batch is other streams': a look again soon.
    timespec ts{.tv_sec = 0, .tv_nsec = beside ? static_cast<long>(kBesidePollNs) : 200'000};
    nanosleep(&ts, nullptr);
    return false;
  }
  const CUresult rc = wait_for_event(ev);
  std::lock_guard lock(mu_);
  if (rc == CUDA_SUCCESS || rc != CUDA_ERROR_NOT_READY) complete_waited_front_locked(ev, usage);
  return false;
}

CUresult GpuTracker::wait_for_event(CUevent ev) noexcept {
  CUresult rc;
  {
    const SyncOp op;  // memory pools may give memory back here
    // Outside the lock, a capture may begin at any moment: always relaxed
    // (the wait is for the oldest batch, milliseconds; two calls more).
    const RelaxedCaptureMode relaxed(true);
    rc = real().cuEventSynchronize(ev);  // blocking-sync event: sleeps
  }
  waits_out_.fetch_sub(1, std::memory_order_release);
  return rc;
}

// After a wait for `ev` outside the lock: the batch it ended may have been
// completed by another thread meanwhile, and its handle recycled through
// the pool and recorded again, for a later batch now at the front. The
// handle alone would complete that batch while its work still runs (seen:
// every completion of a sync-every-kernel loop dated up to a kernel early
// for a second, a lone cap of 50 at 58-67 %). So the event must also be
// complete now; a driver error (its context gone) completes it as before.
void GpuTracker::complete_waited_front_locked(CUevent ev, shm::GpuUsage& usage) noexcept {
  if (batches_.empty() || batches_.front().event != ev) return;
  const RelaxedCaptureMode relaxed(captures_active());
  if (real().cuEventQuery(ev) == CUDA_ERROR_NOT_READY) return;
  complete_front_locked(ev, shm::monotonic_ns(), usage);
}

void GpuTracker::poll_loop(shm::GpuUsage* usage) noexcept {
  const RealDriver& r = real();
  // The drain this thread publishes is what a hand-off waits for: its
  // timed sleeps end on time, not up to the default 50 us timer slack late.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  // Our driver calls must never invalidate a global-mode capture elsewhere.
  if (r.cuThreadExchangeStreamCaptureMode) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    r.cuThreadExchangeStreamCaptureMode(&mode);
  }
  // The epoch of the context made current here (a context that ended is
  // followed by the next one the batches are recorded in).
  std::uint32_t bound_epoch = ~0u;
  // Under the lock: whether ctx_ is current here. This thread's records
  // need it: their events are made in the current context, and must be in
  // the stream's. Where ctx_ is not known yet (after a context's end), the
  // tail's stream tells it (below).
  const auto bound = [&] {
    if (ctx_ && bound_epoch != ctx_epoch_ && r.cuCtxSetCurrent &&
        r.cuCtxSetCurrent(ctx_) == CUDA_SUCCESS)
      bound_epoch = ctx_epoch_;
    return ctx_ && bound_epoch == ctx_epoch_;
  };
  for (;;) {
    CUevent ev = nullptr;
    bool ending = false;
    {
      std::lock_guard lock(mu_);
      // A context's end waits for this thread's waits to be over, then
      // holds the lock through the driver's call: no new wait meanwhile.
      ending = ending_ != 0;
      if (!ending) bound();
      if (!ending && !batches_.empty()) {
        ev = batches_.front().event;
        waits_out_.fetch_add(1, std::memory_order_relaxed);  // under the lock: see ContextEnding
      }
    }
    if (ending) {
      timespec ts{.tv_sec = 0, .tv_nsec = 50'000};
      nanosleep(&ts, nullptr);
      continue;
    }
    if (ev) {
      wait_for_event(ev);
      std::lock_guard lock(mu_);
      complete_waited_front_locked(ev, *usage);
      continue;
    }
    // No recorded batch: a tail of launches may still be unrecorded (the
    // application stopped launching). Record it once it is a batch old.
    const std::uint64_t now = shm::monotonic_ns();
    if (has_tail()) {
      const std::uint64_t due = tail_last_ns_.load(std::memory_order_relaxed) + kRecordIntervalNs;
      if (now >= due) {
        std::lock_guard lock(mu_);
        // Under the lock, so a stream_destroyed() either recorded the tail
        // already or runs after this record. The per-thread default stream
        // handle would mean this thread's: record on the legacy stream,
        // which waits for the per-thread streams' earlier work.
        CUstream s = streams_.tail();
        if (s == CU_STREAM_PER_THREAD) s = nullptr;  // the poller launches nothing
        // After a context's end the next context is unknown until a record
        // learns it: the tail's stream, where it is a stream of its own, says.
        CUcontext of_tail = nullptr;
        if (!ctx_ && ending_ == 0 && s != nullptr && s != CU_STREAM_LEGACY &&
            s != BatchStreams::none() && r.cuStreamGetCtx &&
            r.cuStreamGetCtx(s, &of_tail) == CUDA_SUCCESS)
          ctx_ = of_tail;
        if (has_tail() && ending_ == 0 && bound() &&
            (s == BatchStreams::none() || !stream_is_capturing(s)))
          record_locked(s, now, usage);
        if (batches_.empty()) {
          // Could not record (capture in progress): look again shortly.
        } else {
          continue;
        }
      }
      timespec ts{.tv_sec = 0, .tv_nsec = static_cast<long>(kRecordIntervalNs)};
      nanosleep(&ts, nullptr);
      continue;
    }
    {
      // A busy mark with nothing submitted (e.g. a launch failed) ends here.
      std::lock_guard lock(mu_);
      if (batches_.empty() && !has_tail() && busy()) settle_idle_locked();
    }
    // Idle: sleep until a launch records a batch (it wakes us), at most 50 ms.
    const std::uint32_t seen = wake_word_.load(std::memory_order_acquire);
    poller_idle_.store(true, std::memory_order_release);
    if (!has_tail()) {
      bool empty;
      {
        std::lock_guard lock(mu_);
        empty = batches_.empty();
      }
      if (empty) shm::futex_wait(wake_word_, seen, 50'000'000);
    }
    poller_idle_.store(false, std::memory_order_release);
  }
}

}  // namespace cushare::shim::gate
