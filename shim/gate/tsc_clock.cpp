#include "shim/gate/tsc_clock.hpp"

namespace cushare::shim::tsc {
namespace {
// Whether `previous`, converting `ticks` past its span, lands within
// kMaxAnchorErrorNs of `ns` (or is too old, or no anchor, to say).
bool agrees(const Anchor& previous, std::uint64_t ticks, std::uint64_t ns) noexcept {
  if (previous.max_ticks == 0 || ns < previous.ns || ns - previous.ns >= kCheckSpanNs) return true;
  const std::uint64_t d = ticks - previous.ticks;  // wraps when the counter went back
  // Under kCheckSpanNs of clock time, the counter must not be back or twice
  // as far ahead (the product below then stays in 64 bits).
  if (d >= 2 * (kCheckSpanNs / kAnchorSpanNs) * previous.max_ticks) return false;
  const std::uint64_t predicted = previous.ns + ((d * previous.mult) >> 32);
  const std::uint64_t error = predicted > ns ? predicted - ns : ns - predicted;
  return error <= kMaxAnchorErrorNs;
}
}  // namespace

Anchor Calibration::anchor(std::uint64_t ticks, std::uint64_t ns, const Anchor& previous) noexcept {
  const Anchor clock_only{.ticks = ticks, .ns = ns};
  int state = state_.load(std::memory_order_acquire);
  if (state == kEmpty) {
    if (state_.compare_exchange_strong(state, kSetting, std::memory_order_acq_rel)) {
      base_ticks_ = ticks;
      base_ns_ = ns;
      state_.store(kBased, std::memory_order_release);
      return clock_only;
    }
  }
  if (state != kBased) return clock_only;  // being set up by another thread, or broken
  if (!agrees(previous, ticks, ns)) {
    state_.store(kBroken, std::memory_order_release);
    return clock_only;
  }
  // Readings within the first baseline only wait: a thread racing the one
  // that took the base may even pair an earlier time with it.
  if (ns < base_ns_ + kMinBaselineNs) return clock_only;
  if (ticks <= base_ticks_) {
    // A baseline later the counter is not ahead of the base: it was reset
    // (or does not count), so it does not track the clock.
    state_.store(kBroken, std::memory_order_release);
    return clock_only;
  }
  refine(ticks, ns);
  if (broken()) return clock_only;
  const Mult mult = mult_.load(std::memory_order_relaxed);
  if (mult == 0) return clock_only;  // baseline too short yet
  return {.ticks = ticks, .ns = ns, .mult = mult, .max_ticks = (kAnchorSpanNs << 32) / mult};
}

void Calibration::refine(std::uint64_t ticks, std::uint64_t ns) noexcept {
  // Callers guarantee ns >= base_ns_ + kMinBaselineNs and ticks > base_ticks_.
  const std::uint64_t span = ns - base_ns_;
  if (span < 2 * mult_baseline_ns_.load(std::memory_order_relaxed)) return;
  const std::uint64_t elapsed_ticks = ticks - base_ticks_;
  const Mult mult = static_cast<Mult>((static_cast<unsigned __int128>(span) << 32) / elapsed_ticks);
  const Mult old = mult_.load(std::memory_order_relaxed);
  const bool plausible = mult >= kMinMult && mult <= max_mult_;
  const bool steady = old == 0 || (mult > old ? mult - old : old - mult) <= old / kRateTolerance;
  if (!plausible || !steady) {
    state_.store(kBroken, std::memory_order_release);
    return;
  }
  mult_.store(mult, std::memory_order_relaxed);
  mult_baseline_ns_.store(span, std::memory_order_relaxed);
}

}  // namespace cushare::shim::tsc
