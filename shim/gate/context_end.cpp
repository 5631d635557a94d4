// The launch gate and the end of a context (docs/scheduler.md, "A context's
// end"). The driver destroys a context's events and streams with it, and a
// call naming one afterwards may act on freed memory: the tracker's batch
// events, its pool, its probe and join streams, and the application's streams
// filed in its batch set must all be forgotten by then, and no thread may be
// waiting on one of them while the context goes.
#include <time.h>

#include "shim/driver/real_driver.hpp"
#include "shim/gate/tracker.hpp"
#include "shim/process/allocation_state.hpp"
#include "shim/process/logging.hpp"
#include "shm/clock.hpp"
#include "shm/futex.hpp"

namespace cushare::shim::gate {

namespace {
// Names the legacy or per-thread stream of whatever context is current at a
// record, or nothing: no handle the context's end destroys.
bool is_pseudo_stream(CUstream s) noexcept {
  return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD ||
         s == BatchStreams::none();
}
}  // namespace

bool GpuTracker::names_context_locked(CUcontext ctx) const noexcept {
  return ctx && (ctx_ == ctx || probe_ctx_ == ctx || join_ctx_ == ctx);
}

void GpuTracker::forget_streams_of_locked(CUcontext ctx) noexcept {
  const RealDriver& r = real();
  if (!r.cuStreamGetCtx) return;
  // Taken and filed again at once: launchers may file meanwhile, records
  // (the only other takers) wait for the lock.
  const BatchStreams::Taken filed = streams_.take();
  streams_.put_back(filed, BatchStreams::none());
  for (std::size_t i = 0; i < filed.count; ++i) {
    const CUstream s = filed.streams[i];
    if (is_pseudo_stream(s)) continue;
    CUcontext owner = nullptr;
    if (r.cuStreamGetCtx(s, &owner) == CUDA_SUCCESS && owner == ctx) streams_.forget(s);
  }
}

bool GpuTracker::wait_for_event_waits_locked() noexcept {
  const std::uint64_t until = shm::monotonic_ns() + kContextEndWaitNs;
  while (waits_out_.load(std::memory_order_acquire) != 0) {
    if (shm::monotonic_ns() >= until) return false;
    timespec ts{.tv_sec = 0, .tv_nsec = 50'000};
    nanosleep(&ts, nullptr);
  }
  return true;
}

void GpuTracker::context_ended_locked(CUcontext ctx) noexcept {
  if (probe_ctx_ == ctx) {
    probe_stream_ = nullptr;
    probe_ctx_ = nullptr;
  }
  if (join_ctx_ == ctx) {
    join_stream_ = nullptr;
    join_ctx_ = nullptr;
  }
  if (ctx_ != ctx) return;
  // Every event the tracker holds was made while the context was current:
  // in the batches, the pool and the roles (spell ends, gap probes, anchor).
  batches_.clear();
  free_events_.clear();
  spell_end_ = nullptr;
  spell_end_lo_ns_ = 0;
  spell_start_ = {};
  gap_ = {};
  anchor_ = {};
  // The work counted in flight ended with the context: completed now, the
  // launches of the tail too (counted in usage.launches as a record would).
  const std::uint64_t end = submitted_count();
  const AllocationState* st = allocation_state();
  shm::GpuUsage* usage = st ? &st->usage->gpus[gpu_] : nullptr;
  if (usage && end > published_launches_) {
    usage->launches.fetch_add(end - published_launches_, std::memory_order_relaxed);
    published_launches_ = end;
  }
  recorded_count_.store(end, std::memory_order_release);
  completed_.store(end, std::memory_order_release);
  tail_first_ns_.store(0, std::memory_order_relaxed);
  since_record_.store(0, std::memory_order_relaxed);
  oldest_batch_end_.store(0, std::memory_order_relaxed);
  oldest_batch_ns_.store(0, std::memory_order_release);
  poll_not_ready_at_.store(kNoLaunchCount, std::memory_order_relaxed);
  poll_declined_at_.store(kNoLaunchCount, std::memory_order_relaxed);
  const std::uint64_t now = shm::monotonic_ns();
  last_completion_ns_ = now;
  last_completion_atomic_.store(now, std::memory_order_relaxed);
  // The next launch records at once, from its own thread: that record
  // learns the next context (the poller cannot: its current context is
  // the one that ended).
  last_record_ns_.store(0, std::memory_order_relaxed);
  // The next record learns the context it is made in; the poller makes it
  // current.
  ctx_ = nullptr;
  ++ctx_epoch_;
  left_idle_ = false;
  if (settle_idle_locked()) {
    if (usage) publish_drained(now, *usage);
    if (left_idle_) idle_since_ns_ = now;
  }
  progress_word_.fetch_add(1, std::memory_order_release);
  if (progress_waiters_.load(std::memory_order_acquire) > 0) shm::futex_wake_all(progress_word_);
}

// In the trackers' order, as RecordsHeld: a tracker held is never waited for
// by one held later.
ContextEnding::ContextEnding(CUcontext ctx) noexcept : ctx_(ctx) {
  detail::Trackers* trackers = detail::g_trackers.load(std::memory_order_acquire);
  if (!trackers || !ctx) return;
  for (GpuTracker& t : *trackers) {
    t.mu_.lock();
    t.forget_streams_of_locked(ctx);
    if (!t.names_context_locked(ctx)) {
      t.mu_.unlock();
      continue;
    }
    if (!t.wait_for_event_waits_locked())
      log().warn(
          "the launch gate still waits on an event of context {} after {} s; the context ends "
          "with the wait under way",
          static_cast<const void*>(ctx), kContextEndWaitNs / 1'000'000'000);
    held_[count_++] = &t;
  }
}

ContextEnding::~ContextEnding() {
  for (std::size_t i = count_; i > 0; --i) held_[i - 1]->mu_.unlock();
}

void ContextEnding::ended() noexcept {
  for (std::size_t i = 0; i < count_; ++i) held_[i]->context_ended_locked(ctx_);
}

}  // namespace cushare::shim::gate
