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

inline constexpr const char* kCounterName =
#if defined(__aarch64__)
    "the generic timer (cntvct_el0)";
#else
    "the time-stamp counter";
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

// Plausible rates: up to 20 GHz, down to 500 MHz for an x86 TSC (it runs at
// the CPU's nominal frequency) and to 7.8 MHz for an aarch64 generic timer
// (25 MHz to 1 GHz on the parts we know).
inline constexpr Mult kMinMult = (1ull << 32) / 20;  // 0.05 ns per tick
inline constexpr Mult kMaxMultX86 = 2ull << 32;      // 2 ns per tick
inline constexpr Mult kMaxMultAarch64 = 128ull << 32;
inline constexpr Mult kMaxMult =
#if defined(__aarch64__)
    kMaxMultAarch64;
#else
    kMaxMultX86;
#endif

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
  explicit Calibration(Mult max_mult = kMaxMult) noexcept : max_mult_(max_mult) {}

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

  const Mult max_mult_;
  std::atomic<int> state_{kEmpty};
  std::uint64_t base_ticks_ = 0;  // written once, before state_ becomes kBased
  std::uint64_t base_ns_ = 0;
  std::atomic<Mult> mult_{0};
  std::atomic<std::uint64_t> mult_baseline_ns_{0};
};

// A thread's anchors: the one it converts with (max_ticks 0: none), and the
// last one that converted, kept through failed paired readings (a thread
// preempted in one is the one likely to have moved CPUs) for the next
// paired reading's check.
struct ThreadAnchors {
  Anchor current;
  Anchor checked;
};

// A thread's paired reading: the counter between two clock reads close
// together, retried (up to three times) when the thread was preempted in
// between. Returns the clock's time and anchors the thread (or leaves it
// without an anchor: the counter is not to be used yet, or at all).
template <class ReadClock, class ReadCounter>
std::uint64_t paired_reading(Calibration& cal, ThreadAnchors& thread, ReadClock&& read_clock,
                             ReadCounter&& read_counter) noexcept {
  if (thread.current.max_ticks != 0) thread.checked = thread.current;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::uint64_t before = read_clock();
    const std::uint64_t ticks = read_counter();
    const std::uint64_t after = read_clock();
    if (after - before > kMaxPairSkewNs) continue;
    const std::uint64_t ns = before + (after - before) / 2;
    thread.current = cal.anchor(ticks, ns, thread.checked);
    if (thread.current.max_ticks != 0) thread.checked = thread.current;
    return ns;
  }
  thread.current = {};
  return read_clock();
}

}  // namespace cushare::shim::tsc
