#include "tests/gpu/probe/work_loop.hpp"

#include "tests/gpu/probe/messages.hpp"

#include <algorithm>

namespace cushare::gpuprobe {

WorkLoop::WorkLoop(const DriverApi& api, CUstream stream, int inflight, double progress_interval_s)
    : api_(api),
      stream_(stream),
      inflight_(inflight < 1 ? 1 : static_cast<std::size_t>(inflight)),
      interval_s_(progress_interval_s) {
  for (std::size_t i = 0; i < inflight_; ++i) {
    CUevent ev = nullptr;
    check(api_, api_.eventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    free_events_.push_back(ev);
  }
  next_report_s_ = monotonicSeconds();
  reportIfDue(true);
}

WorkLoop::~WorkLoop() {
  for (CUevent ev : queued_) {
    api_.eventSynchronize(ev);
    api_.eventDestroy(ev);
  }
  for (CUevent ev : free_events_) api_.eventDestroy(ev);
}

void WorkLoop::submit(const std::function<CUresult()>& enqueue) {
  if (free_events_.empty()) retireOldest();
  check(api_, enqueue(), "launch");
  CUevent ev = free_events_.back();
  check(api_, api_.eventRecord(ev, stream_), "cuEventRecord");
  free_events_.pop_back();
  queued_.push_back(ev);
  // Count work that already finished without blocking, so progress lines
  // track completions closely even when the queue never fills.
  while (!queued_.empty() && api_.eventQuery(queued_.front()) == CUDA_SUCCESS) {
    free_events_.push_back(queued_.front());
    queued_.pop_front();
    ++completed_;
  }
  reportIfDue(false);
}

void WorkLoop::retireOldest() {
  CUevent ev = queued_.front();
  check(api_, api_.eventSynchronize(ev), "cuEventSynchronize");
  queued_.pop_front();
  free_events_.push_back(ev);
  ++completed_;
}

void WorkLoop::drain() {
  while (!queued_.empty()) retireOldest();
  reportIfDue(true);
}

void WorkLoop::reportIfDue(bool force) {
  const double now = monotonicSeconds();
  if (!force && now < next_report_s_) return;
  next_report_s_ = now + interval_s_;
  emit({{"event", "progress"}, {"t", now}, {"n", completed_}});
}

LoopResult runLoop(const DriverApi& api, CUstream stream, int inflight, double progress_s,
                   double seconds, ControlChannel& control,
                   const std::function<CUresult()>& enqueue) {
  const double start = monotonicSeconds();
  WorkLoop loop(api, stream, inflight, progress_s);
  while ((seconds <= 0 || monotonicSeconds() - start < seconds) && !control.releaseRequested()) {
    loop.submit(enqueue);
  }
  loop.drain();
  return {loop.completed(), monotonicSeconds() - start};
}

LoopResult runDutyLoop(const DriverApi& api, CUstream stream, int inflight, double seconds,
                       double period_s, std::uint64_t units, ControlChannel& control,
                       const std::function<CUresult()>& enqueue) {
  const double start = monotonicSeconds();
  // Progress comes from the marks at the bursts' edges only.
  WorkLoop loop(api, stream, inflight, 1e9);
  double period_start = start;
  while ((seconds <= 0 || period_start - start < seconds) && !control.releaseRequested()) {
    loop.report();
    for (std::uint64_t i = 0; i < units; ++i) loop.submit(enqueue);
    loop.drain();
    // A burst that overran its period (a throttled tenant) starts the next one now.
    period_start = std::max(period_start + period_s, monotonicSeconds());
    const double rest = period_start - monotonicSeconds();
    if (rest > 0) control.nextLine(static_cast<int>(rest * 1000));
  }
  return {loop.completed(), monotonicSeconds() - start};
}

}  // namespace cushare::gpuprobe
