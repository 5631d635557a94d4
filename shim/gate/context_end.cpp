// The launch gate and the end of a context (docs/scheduler.md, "A context's
// end"). The driver destroys a context's events and streams with it, and a
// call naming one afterwards may act on freed memory: no gate thread may use
// the tracker's batch events, its pool, its probe and join streams or the
// application's streams filed in its batch set while the context goes, nor
// wait on one of the events, and all are forgotten once it went.
#include <time.h>

#include <algorithm>

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

thread_local bool t_ending = false;

}  // namespace

bool ending_a_context() noexcept {
  return t_ending;
}

bool GpuTracker::names_context_locked(CUcontext ctx) const noexcept {
  return ctx && (ctx_ == ctx || probe_ctx_ == ctx || join_ctx_ == ctx);
}

CUstream* GpuTracker::streams_of_locked(CUcontext ctx, CUstream* out, CUstream* end) noexcept {
  const RealDriver& r = real();
  if (!r.cuStreamGetCtx) return out;
  // Taken and filed again at once: launchers may file meanwhile, records
  // (the only other takers) wait for the lock.
  const BatchStreams::Taken filed = streams_.take();
  streams_.put_back(filed, BatchStreams::none());
  for (std::size_t i = 0; i < filed.count && out != end; ++i) {
    const CUstream s = filed.streams[i];
    if (is_pseudo_stream(s)) continue;
    CUcontext owner = nullptr;
    if (r.cuStreamGetCtx(s, &owner) == CUDA_SUCCESS && owner == ctx) *out++ = s;
  }
  return out;
}

void GpuTracker::context_ended_locked(CUcontext ctx, bool streams_in_ctx) noexcept {
  if (probe_ctx_ == ctx) {
    probe_stream_ = nullptr;
    probe_ctx_ = nullptr;
  }
  if (join_ctx_ == ctx) {
    join_stream_ = nullptr;
    join_ctx_ = nullptr;
  }
  // Not learnt yet (no record since the last end): a tail beside streams of
  // `ctx` was the context's.
  if (ctx_ != ctx && (ctx_ != nullptr || !streams_in_ctx || !has_tail())) return;
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
  // The next launch records at once, from its own thread, and learns the
  // next context.
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

void ContextEnding::hold_all(detail::Trackers& trackers) noexcept {
  const std::uint64_t deadline = shm::monotonic_ns() + kContextEndWaitNs;
  for (;;) {
    for (GpuTracker& t : trackers) t.mu_.lock();
    // Waits start only under the lock: none starts while all are held. One
    // under way on a tracker with anything in the context must end first.
    note_streams(trackers);
    bool waiting = false;
    for (std::size_t i = 0; i < trackers.size(); ++i) {
      GpuTracker& t = trackers[i];
      if (t.waits_out_.load(std::memory_order_acquire) == 0) continue;
      if (!t.names_context_locked(ctx_) && !has_filed(t)) continue;
      waiting = true;
      if (!waits_held_[i]) {
        waits_held_[i] = true;
        ++t.ending_;  // no new wait on its events until this ends
      }
    }
    if (!waiting) return;
    for (auto it = trackers.rbegin(); it != trackers.rend(); ++it) it->mu_.unlock();
    // Those waits end when their batch completes: milliseconds under the
    // queue bound, a kernel's length beyond it.
    for (std::size_t i = 0; i < trackers.size(); ++i) {
      while (waits_held_[i] && trackers[i].waits_out_.load(std::memory_order_acquire) != 0 &&
             shm::monotonic_ns() < deadline) {
        timespec ts{.tv_sec = 0, .tv_nsec = 50'000};
        nanosleep(&ts, nullptr);
      }
    }
    if (shm::monotonic_ns() >= deadline) {
      log().warn(
          "the launch gate still waits on an event of context {} after {} s; the driver's call "
          "that may end the context goes ahead with the wait under way",
          static_cast<const void*>(ctx_), kContextEndWaitNs / 1'000'000'000);
      for (GpuTracker& t : trackers) t.mu_.lock();
      note_streams(trackers);  // as filed now
      return;
    }
  }
}

void ContextEnding::note_streams(detail::Trackers& trackers) noexcept {
  filed_count_ = 0;
  for (GpuTracker& t : trackers) {
    std::array<CUstream, BatchStreams::kCapacity + 1> mine{};
    const CUstream* end = t.streams_of_locked(ctx_, mine.data(), mine.data() + mine.size());
    for (const CUstream* s = mine.data(); s != end && filed_count_ < filed_.size(); ++s)
      filed_[filed_count_++] = {.tracker = &t, .stream = *s};
  }
}

bool ContextEnding::has_filed(const GpuTracker& t) const noexcept {
  return std::any_of(filed_.begin(), filed_.begin() + static_cast<std::ptrdiff_t>(filed_count_),
                     [&](const Filed& f) { return f.tracker == &t; });
}

ContextEnding::ContextEnding(CUcontext ctx) noexcept : ctx_(ctx) {
  detail::Trackers* trackers = detail::g_trackers.load(std::memory_order_acquire);
  if (!trackers || !ctx || ending_a_context()) return;
  hold_all(*trackers);
  trackers_ = trackers;
  t_ending = true;
}

ContextEnding::~ContextEnding() {
  if (!trackers_) return;
  t_ending = false;
  for (std::size_t i = trackers_->size(); i > 0; --i) {
    GpuTracker& t = (*trackers_)[i - 1];
    if (waits_held_[i - 1]) --t.ending_;
    t.mu_.unlock();
  }
}

void ContextEnding::ended() noexcept {
  if (!trackers_) return;
  for (GpuTracker& t : *trackers_) t.context_ended_locked(ctx_, has_filed(t));
  // The streams died with the context: no later record may name them.
  for (std::size_t i = 0; i < filed_count_; ++i)
    filed_[i].tracker->streams_.forget(filed_[i].stream);
}

}  // namespace cushare::shim::gate
