// A CLOCK_MONOTONIC reading from the CPU's counter (x86-64: the time-stamp
// counter; aarch64: the generic timer's virtual count): the launch gate's
// clock (docs/scheduler.md, "Launch gate: the clock").
//
// clock_gettime() costs ~30 ns on a VM even through the vDSO (a fenced
// counter read, a seqlock, a conversion); a bare counter read is a third of
// that. Each thread anchors the counter to CLOCK_MONOTONIC (one paired
// reading) and converts counter deltas with a process-wide rate calibrated
// against CLOCK_MONOTONIC itself. An anchor serves at most kAnchorSpanNs of
// counter time, so rate error and clock slewing stay far below a
// microsecond; past that, or when the counter goes backwards, the thread
// takes a fresh paired reading, and checks there what its previous anchor
// would have read. Pure: the counter and the clock are arguments, so the
// calibration is unit-tested with made-up counters.
#pragma once

#include <atomic>
#include <cstdint>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace cushare::shim::tsc {

// Longest counter span one anchor converts.
inline constexpr std::uint64_t kAnchorSpanNs = 1'000'000;
// Shortest calibration baseline before the counter is used at all.
inline constexpr std::uint64_t kMinBaselineNs = 10'000'000;
// A later calibration that moves the rate by more than 1/kRateTolerance
// means the counter does not run at a constant rate: stop using it. (NTP
// slews CLOCK_MONOTONIC by at most 500 ppm; a paired reading may be up to
// kMaxPairSkewNs apart, 200 ppm of the shortest baseline.)
inline constexpr std::uint64_t kRateTolerance = 200;
// A paired reading whose two clock reads lie further apart than this
// (the thread was preempted in between) is taken again.
inline constexpr std::uint64_t kMaxPairSkewNs = 2'000;
// A thread's new paired reading taken within kCheckSpanNs of its previous
// anchor must agree with what that anchor converts to within this. Both
// readings are good to a microsecond, and rate error and slewing move the
// prediction by a few more over kCheckSpanNs; a counter that jumped (another
// CPU's, not synchronised with this one's; a rate that changed under a
// hypervisor) is dropped, having misled at most one anchor span.
inline constexpr std::uint64_t kMaxAnchorErrorNs = 20'000;
inline constexpr std::uint64_t kCheckSpanNs = 4 * kAnchorSpanNs;

// Whether this architecture has a counter the gate can read.
inline constexpr bool kHasCounter =
#if defined(__x86_64__) || defined(__aarch64__)
    true;
#else
    false;
#endif

// The counter. Not ordered against earlier loads (no fence, no isb): a
// reading taken a few nanoseconds early is as good as one on time here.
inline std::uint64_t read_counter() noexcept {
#if defined(__x86_64__)
  return __rdtsc();
#elif defined(__aarch64__)
  std::uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  return 0;
#endif
}

// ns per counter tick, as a 32.32 fixed-point factor.
using Mult = std::uint64_t;

struct Anchor {
  std::uint64_t ticks = 0;
  std::uint64_t ns = 0;
  Mult mult = 0;
  std::uint64_t max_ticks = 0;  // 0: convert nothing (use the clock)
};

// The reading for `ticks`, when the anchor covers it.
inline bool convert(const Anchor& a, std::uint64_t ticks, std::uint64_t& ns) noexcept {
  const std::uint64_t d = ticks - a.ticks;  // wraps when the counter went back: rejected
  if (d >= a.max_ticks) return false;
  ns = a.ns + ((d * a.mult) >> 32);
  return true;
}

// The process-wide rate, from the first paired reading (the base) and later
// ones: refined whenever the baseline has doubled, so the rate error shrinks
// while the process runs. Lock-free; racing refinements store equally valid
// rates.
class Calibration {
 public:
  // An anchor for a paired reading taken now (ticks read just before ns).
  // `previous`: the thread's anchor before this reading, checked against it.
  Anchor anchor(std::uint64_t ticks, std::uint64_t ns, const Anchor& previous = {}) noexcept;

  // The counter has shown a non-constant rate (or implausible values): the
  // clock is used from now on.
  bool broken() const noexcept { return state_.load(std::memory_order_acquire) == kBroken; }
  Mult mult() const noexcept { return mult_.load(std::memory_order_relaxed); }

 private:
  enum : int { kEmpty, kSetting, kBased, kBroken };
  void refine(std::uint64_t ticks, std::uint64_t ns) noexcept;

  std::atomic<int> state_{kEmpty};
  std::uint64_t base_ticks_ = 0;  // written once, before state_ becomes kBased
  std::uint64_t base_ns_ = 0;
  std::atomic<Mult> mult_{0};
  std::atomic<std::uint64_t> mult_baseline_ns_{0};
};

}  // namespace cushare::shim::tsc
