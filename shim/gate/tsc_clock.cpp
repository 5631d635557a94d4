#include "shim/gate/tsc_clock.hpp"

namespace cushare::shim::tsc {
namespace {
// Plausible counter rates: 100 MHz to 20 GHz.
constexpr Mult kMinMult = (1ull << 32) / 20;  // 0.05 ns per tick
constexpr Mult kMaxMult = 10ull << 32;        // 10 ns per tick
}  // namespace

Anchor Calibration::anchor(std::uint64_t ticks, std::uint64_t ns) noexcept {
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
  const bool plausible = mult >= kMinMult && mult <= kMaxMult;
  const bool steady = old == 0 || (mult > old ? mult - old : old - mult) <= old / kRateTolerance;
  if (!plausible || !steady) {
    state_.store(kBroken, std::memory_order_release);
    return;
  }
  mult_.store(mult, std::memory_order_relaxed);
  mult_baseline_ns_.store(span, std::memory_order_relaxed);
}

}  // namespace cushare::shim::tsc
