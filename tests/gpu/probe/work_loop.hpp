// Keeps a bounded amount of work queued on one stream and counts completions:
// an event is recorded after each unit of work, and once `inflight` units are
// queued the oldest event is waited for. Completions (not submissions) are
// what the orchestrator turns into GPU-time shares, and the bound keeps a
// throttled tenant from hiding behind a long queue.
#pragma once

#include "tests/gpu/probe/control.hpp"
#include "tests/gpu/probe/driver_api.hpp"

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

namespace cushare::gpuprobe {

class WorkLoop {
 public:
  WorkLoop(const DriverApi& api, CUstream stream, int inflight, double progress_interval_s);
  ~WorkLoop();
  WorkLoop(const WorkLoop&) = delete;
  WorkLoop& operator=(const WorkLoop&) = delete;

  // Enqueues one unit of work (`enqueue` launches it on the stream), then
  // emits a progress line if the interval has passed.
  void submit(const std::function<CUresult()>& enqueue);
  // Waits for everything queued and emits a last progress line.
  void drain();
  // Emits a progress line now.
  void report() { reportIfDue(true); }
  std::uint64_t completed() const { return completed_; }

 private:
  void retireOldest();
  void reportIfDue(bool force);

  const DriverApi& api_;
  CUstream stream_;
  std::size_t inflight_;
  double interval_s_;
  double next_report_s_ = 0;
  std::vector<CUevent> free_events_;
  std::deque<CUevent> queued_;
  std::uint64_t completed_ = 0;
};

struct LoopResult {
  std::uint64_t completed = 0;
  double seconds = 0;
};

// Submits `enqueue` through a WorkLoop for `seconds` of wall-clock time
// (seconds <= 0: until released), stopping early on "release", then drains.
LoopResult runLoop(const DriverApi& api, CUstream stream, int inflight, double progress_s,
                   double seconds, ControlChannel& control,
                   const std::function<CUresult()>& enqueue);

// As runLoop, on a duty cycle: every `period_s`, `units` of work back to
// back, drained, then idle until the period ends. A progress line marks each
// burst's start and end, so completions interpolate exactly between bursts.
LoopResult runDutyLoop(const DriverApi& api, CUstream stream, int inflight, double seconds,
                       double period_s, std::uint64_t units, ControlChannel& control,
                       const std::function<CUresult()>& enqueue);

}  // namespace cushare::gpuprobe
