// How much GPU time a process's launched-but-unfinished work still needs:
// the launch gate's queue estimate (docs/scheduler.md, "Queue bound"). Pure:
// the tracker passes a snapshot of its counters.
#pragma once

#include <algorithm>
#include <cstdint>

namespace cushare::shim::gate {

// Queued work a process may keep ahead of the GPU (estimated GPU time of the
// launches not known complete). Enough to ride out short CPU stalls; small
// enough that the work stops close to the lease's end.
inline constexpr std::uint64_t kQueueHorizonNs = 2'000'000;
// Before the first measured batch: at most this many launches in flight.
inline constexpr std::uint64_t kBootstrapPending = 2;
// Slow start: the launches in flight may double with every completed batch
// from kBootstrapPending, up to here (then only the time estimate counts).
// The first samples come from the first one or two kernels; a burst priced
// at their average could queue far more than the horizon of longer ones.
inline constexpr std::uint64_t kMaxWindow = 1u << 16;
// How late the poller may see a batch complete, as far as the estimate is
// concerned (a blocking-sync wake-up on a busy host).
inline constexpr std::uint64_t kCompletionLagNs = 250'000;

// The per-launch figure after a batch completed with GPU time `sample` per
// launch; `significant`: the batch was long or large enough to say much
// (tracker.hpp). A moving average, 7/8 the old figure. A batch of a few
// launches over a short span is mostly measurement error (the driver held
// a launch after the gate stamped it, the poller woke late): it may lower
// the figure (too low is corrected as the head runs, estimate_queued_ns)
// but not raise it, or a sample inflated by those delays makes the gate
// wait, the waits cut more such batches, and a lone tenant ends up
// throttled by its own estimate. Nor does one sample count for more than
// kMaxSampleRise times the old figure: a batch that waited behind another
// context's work on the GPU measured 28 ms for 1 ms kernels once, and the
// figure of 4.4 ms it made kept every launch out of the cut leases its
// tenant was granted (1.9 ms with the bound). Kernels that really grew
// longer are followed a little more slowly (x 1.875 per batch at most), and
// a process whose small batches mix rare long kernels with short ones
// settles a little below their mean.
inline constexpr std::uint64_t kMaxSampleRise = 8;
[[nodiscard]] inline std::uint64_t next_per_launch_ns(std::uint64_t old, std::uint64_t sample,
                                                      bool significant) noexcept {
  if (old == 0) return sample;
  if (sample >= old && !significant) return old;
  return (old * 7 + std::min(sample, old * kMaxSampleRise)) / 8;
}

// A batch's per-launch sample with the time slices of the allocation's
// other processes taken out: the GPU slices its time among the contexts
// with work, so a batch that ran while `busy_processes` of the allocation's
// processes (this one among them) had work in flight took up to that many
// times its own (a 1 ms kernel beside a sibling's 20 ms ones measured
// 2.2 ms). The count is read at the batch's completion: a sibling that
// stalled with work in flight still counts. At least 1 ns, as `sample`.
[[nodiscard]] inline std::uint64_t own_launch_sample_ns(std::uint64_t sample,
                                                        std::uint32_t busy_processes) noexcept {
  return std::max<std::uint64_t>(sample / std::max<std::uint32_t>(busy_processes, 1), 1);
}

struct QueueSnapshot {
  std::uint64_t pending = 0;        // launches submitted and not known complete
  std::uint64_t per_launch_ns = 0;  // measured GPU time per launch (0: none yet)
  std::uint64_t since_ns = 0;       // the GPU has worked through the queue since then
  // Pending launches up to the end of the oldest unfinished batch (all of
  // them when no batch is recorded).
  std::uint64_t head = 0;
  std::uint64_t window = kMaxWindow;  // launches allowed in flight (slow start)
};

// Pending launches x the GPU time per launch, less what the GPU has done
// since `since_ns`. Before the first measurement kBootstrapPending launches,
// and later a full slow-start window, count as more than the whole horizon.
[[gnu::always_inline]] inline std::uint64_t estimate_queued_ns(const QueueSnapshot& q,
                                                               std::uint64_t now,
                                                               std::uint64_t horizon_ns) noexcept {
  if (q.pending == 0) return 0;
  std::uint64_t per = q.per_launch_ns;
  if (per == 0) return q.pending >= kBootstrapPending ? horizon_ns + 1 : 1;
  if (q.pending >= q.window) return horizon_ns + 1;
  const std::uint64_t done = now > q.since_ns ? now - q.since_ns : 0;
  // The head has run for `done` and is not known complete, so its launches
  // take at least (done - lag) / head each, whatever the average says.
  // Without this an average learnt from short kernels would credit long ones
  // as done and let the queue grow without bound behind them. The lag is
  // how late a completion may be seen (the poller's wake-up): without it,
  // tiny kernels whose completions are seen tens of microseconds late would
  // read as long ones and hold a lone tenant's launches for nothing.
  const std::uint64_t head = std::clamp<std::uint64_t>(q.head, 1, q.pending);
  if (done > head * per + kCompletionLagNs) [[unlikely]]
    per = (done - kCompletionLagNs) / head + 1;
  const std::uint64_t total = q.pending * per;
  // Never below one launch's worth while something is pending.
  return total > done + per ? total - done : per;
}

}  // namespace cushare::shim::gate
