// The launch gate's counter clock: calibration against the clock, anchors,
// and giving up on counters that do not track it.
#include "shim/gate/tsc_clock.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace cushare::shim::tsc {
namespace {

// A made-up counter at `ghz` ticks per ns, started at `offset` ticks when
// the clock read `ns0`.
struct FakeCounter {
  double ghz = 2.5;
  std::uint64_t offset = 123'456'789;
  std::uint64_t ns0 = 5'000'000'000;
  std::uint64_t ticks_at(std::uint64_t ns) const {
    return offset + static_cast<std::uint64_t>(std::llround(static_cast<double>(ns - ns0) * ghz));
  }
};

TEST(TscClock, UsesTheClockUntilTheBaselineIsLongEnough) {
  Calibration cal;
  FakeCounter c;
  EXPECT_EQ(cal.anchor(c.ticks_at(c.ns0), c.ns0).max_ticks, 0u);  // the base
  const std::uint64_t early = c.ns0 + kMinBaselineNs - 1;
  EXPECT_EQ(cal.anchor(c.ticks_at(early), early).max_ticks, 0u);
  EXPECT_EQ(cal.mult(), 0u);
  const std::uint64_t later = c.ns0 + kMinBaselineNs;
  const Anchor a = cal.anchor(c.ticks_at(later), later);
  EXPECT_GT(a.max_ticks, 0u);
  EXPECT_FALSE(cal.broken());
}

TEST(TscClock, ConvertsWithinNanosecondsOverTheAnchorSpan) {
  for (const double ghz : {1.0, 2.1, 2.5, 3.7}) {
    Calibration cal;
    FakeCounter c{.ghz = ghz};
    cal.anchor(c.ticks_at(c.ns0), c.ns0);
    const std::uint64_t at = c.ns0 + 3 * kMinBaselineNs;
    const Anchor a = cal.anchor(c.ticks_at(at), at);
    ASSERT_GT(a.max_ticks, 0u) << ghz;
    for (std::uint64_t dt = 0; dt < kAnchorSpanNs; dt += 9'973) {
      std::uint64_t ns = 0;
      ASSERT_TRUE(convert(a, c.ticks_at(at + dt), ns)) << ghz << " " << dt;
      EXPECT_NEAR(static_cast<double>(ns), static_cast<double>(at + dt), 2.0) << ghz;
    }
  }
}

TEST(TscClock, AnAnchorCoversOnlyItsSpanAndNeverBackwards) {
  Calibration cal;
  FakeCounter c;
  cal.anchor(c.ticks_at(c.ns0), c.ns0);
  const std::uint64_t at = c.ns0 + kMinBaselineNs;
  const Anchor a = cal.anchor(c.ticks_at(at), at);
  std::uint64_t ns = 0;
  EXPECT_FALSE(convert(a, c.ticks_at(at + kAnchorSpanNs + 1'000), ns));
  EXPECT_FALSE(convert(a, a.ticks - 1, ns));  // the counter went back
  EXPECT_FALSE(convert(Anchor{}, 42, ns));    // no anchor yet
}

TEST(TscClock, RefinesTheRateAsTheBaselineGrows) {
  Calibration cal;
  FakeCounter c{.ghz = 2.5};
  cal.anchor(c.ticks_at(c.ns0), c.ns0);
  // A first calibration off by a 1 µs read skew, well inside the tolerance.
  const std::uint64_t first = c.ns0 + kMinBaselineNs;
  cal.anchor(c.ticks_at(first) + 2'500, first);
  const Mult rough = cal.mult();
  const std::uint64_t late = c.ns0 + 64 * kMinBaselineNs;
  cal.anchor(c.ticks_at(late), late);
  const double exact = (1.0 / 2.5) * 4294967296.0;
  EXPECT_LT(std::abs(static_cast<double>(cal.mult()) - exact),
            std::abs(static_cast<double>(rough) - exact));
  EXPECT_FALSE(cal.broken());
}

TEST(TscClock, ACounterThatChangesRateIsDropped) {
  Calibration cal;
  FakeCounter c{.ghz = 2.5};
  cal.anchor(c.ticks_at(c.ns0), c.ns0);
  const std::uint64_t first = c.ns0 + kMinBaselineNs;
  cal.anchor(c.ticks_at(first), first);
  ASSERT_NE(cal.mult(), 0u);
  // From here on the counter runs 5 % slow (frequency scaling, a
  // non-invariant TSC): the next refinement sees it.
  const std::uint64_t later = c.ns0 + 4 * kMinBaselineNs;
  const std::uint64_t slow_ticks =
      c.ticks_at(first) + static_cast<std::uint64_t>(0.95 * 2.5 * (later - first));
  const Anchor a = cal.anchor(slow_ticks, later);
  EXPECT_TRUE(cal.broken());
  EXPECT_EQ(a.max_ticks, 0u);
  const std::uint64_t after = later + kMinBaselineNs;
  EXPECT_EQ(cal.anchor(c.ticks_at(after), after).max_ticks, 0u);  // for good
}

TEST(TscClock, ACounterBehindItsBaseIsDropped) {
  Calibration cal;
  FakeCounter c;
  cal.anchor(c.ticks_at(c.ns0), c.ns0);
  const std::uint64_t later = c.ns0 + 2 * kMinBaselineNs;
  EXPECT_EQ(cal.anchor(c.offset - 1'000, later).max_ticks, 0u);  // reset (e.g. resume)
  EXPECT_TRUE(cal.broken());
}

TEST(TscClock, ARacingFirstReadingIsNotABackwardCounter) {
  // Two threads take their first paired readings at once; the second pairs
  // a slightly earlier time and counter value than the base.
  Calibration cal;
  FakeCounter c;
  cal.anchor(c.ticks_at(c.ns0 + 500), c.ns0 + 500);
  EXPECT_EQ(cal.anchor(c.ticks_at(c.ns0), c.ns0).max_ticks, 0u);
  EXPECT_FALSE(cal.broken());
  const std::uint64_t later = c.ns0 + 2 * kMinBaselineNs;
  EXPECT_GT(cal.anchor(c.ticks_at(later), later).max_ticks, 0u);
}

TEST(TscClock, ImplausibleRatesAreDropped) {
  Calibration cal;
  cal.anchor(1'000, 1'000'000);
  // 10 ticks in 10 ms: a 1 kHz "counter".
  EXPECT_EQ(cal.anchor(1'010, 1'000'000 + kMinBaselineNs).max_ticks, 0u);
  EXPECT_TRUE(cal.broken());
}

// A thread's new paired reading against its previous anchor.
struct Reanchor {
  Calibration cal;
  FakeCounter c;
  Anchor first;
  std::uint64_t at = 0;
  Reanchor() {
    cal.anchor(c.ticks_at(c.ns0), c.ns0);
    at = c.ns0 + kMinBaselineNs;
    first = cal.anchor(c.ticks_at(at), at);
  }
};

TEST(TscClock, AReanchorThatAgreesWithThePreviousAnchorKeepsTheCounter) {
  Reanchor r;
  ASSERT_GT(r.first.max_ticks, 0u);
  const std::uint64_t next = r.at + kAnchorSpanNs + 3'000;
  EXPECT_GT(r.cal.anchor(r.c.ticks_at(next) + 10, next, r.first).max_ticks, 0u);
  EXPECT_FALSE(r.cal.broken());
}

TEST(TscClock, ACounterThatJumpedSinceTheThreadsLastAnchorIsDropped) {
  // Another CPU's counter, 100 us ahead of this one's (not synchronised).
  Reanchor r;
  const std::uint64_t next = r.at + 2 * kAnchorSpanNs;
  EXPECT_EQ(r.cal.anchor(r.c.ticks_at(next + 100'000), next, r.first).max_ticks, 0u);
  EXPECT_TRUE(r.cal.broken());
}

TEST(TscClock, ACounterBehindTheThreadsLastAnchorIsDropped) {
  Reanchor r;
  const std::uint64_t next = r.at + kAnchorSpanNs / 2;
  EXPECT_EQ(r.cal.anchor(r.first.ticks - 5'000, next, r.first).max_ticks, 0u);
  EXPECT_TRUE(r.cal.broken());
}

TEST(TscClock, AnOldAnchorIsNotCheckedAgainst) {
  // A thread idle for a while: its anchor says nothing about the counter now
  // (a jump too small for the calibration's own check stays unnoticed).
  Reanchor r;
  const std::uint64_t next = r.at + kCheckSpanNs;
  EXPECT_GT(r.cal.anchor(r.c.ticks_at(next + 100'000), next, r.first).max_ticks, 0u);
  EXPECT_FALSE(r.cal.broken());
}

TEST(TscClock, AGenericTimerOf25MHzIsPlausibleOnAarch64Only) {
  for (const Mult max_mult : {kMaxMultAarch64, kMaxMultX86}) {
    Calibration cal(max_mult);
    FakeCounter c{.ghz = 0.025};
    cal.anchor(c.ticks_at(c.ns0), c.ns0);
    const std::uint64_t at = c.ns0 + 2 * kMinBaselineNs;
    const Anchor a = cal.anchor(c.ticks_at(at), at);
    if (max_mult == kMaxMultX86) {
      EXPECT_EQ(a.max_ticks, 0u);  // no TSC runs at 25 MHz
      EXPECT_TRUE(cal.broken());
      continue;
    }
    ASSERT_GT(a.max_ticks, 0u);
    std::uint64_t ns = 0;
    ASSERT_TRUE(convert(a, c.ticks_at(at + 400'000), ns));
    EXPECT_NEAR(static_cast<double>(ns), static_cast<double>(at + 400'000), 40.0);  // a tick
  }
}

// A clock and a counter for paired_reading(): the counter at 2.5 GHz, plus
// `jump` ticks; each clock read advances the clock by `read_ns`.
struct FakeHost {
  FakeCounter c;
  std::uint64_t now;
  std::uint64_t read_ns = 20;
  std::uint64_t jump = 0;
  FakeHost() : now(c.ns0) {}
  std::uint64_t clock() { return now += read_ns; }
  std::uint64_t counter() const { return c.ticks_at(now) + jump; }
  std::uint64_t reading(Calibration& cal, ThreadAnchors& t) {
    return paired_reading(
        cal, t, [this] { return clock(); }, [this] { return counter(); });
  }
  // A paired reading the thread is preempted in, every attempt.
  std::uint64_t preempted_reading(Calibration& cal, ThreadAnchors& t) {
    const std::uint64_t saved = read_ns;
    read_ns = kMaxPairSkewNs + 1;
    const std::uint64_t ns = reading(cal, t);
    read_ns = saved;
    return ns;
  }
  // The calibration's base, then a reading a baseline later.
  std::uint64_t calibrate(Calibration& cal, ThreadAnchors& t) {
    reading(cal, t);
    EXPECT_EQ(t.current.max_ticks, 0u);
    now += kMinBaselineNs;
    return reading(cal, t);
  }
};

TEST(TscClock, APairedReadingAnchorsTheThread) {
  Calibration cal;
  FakeHost host;
  ThreadAnchors t;
  const std::uint64_t ns = host.calibrate(cal, t);
  ASSERT_GT(t.current.max_ticks, 0u);
  EXPECT_EQ(t.current.ns, ns);
  EXPECT_EQ(t.checked.ns, ns);
}

TEST(TscClock, APairedReadingPreemptedEveryTimeLeavesNoAnchor) {
  Calibration cal;
  FakeHost host;
  ThreadAnchors t;
  host.reading(cal, t);
  host.now += kMinBaselineNs;
  host.preempted_reading(cal, t);  // a reading without preemption would anchor here
  EXPECT_EQ(t.current.max_ticks, 0u);
  EXPECT_FALSE(cal.broken());
}

TEST(TscClock, AThreadPreemptedInAReadingIsStillCheckedAtItsNext) {
  // The thread converted with an anchor, then failed a paired reading (and
  // was moved to a CPU whose counter is 100 us ahead): its next reading is
  // checked against the anchor it last converted with.
  Calibration cal;
  FakeHost host;
  ThreadAnchors t;
  host.calibrate(cal, t);
  ASSERT_GT(t.current.max_ticks, 0u);
  host.now += kAnchorSpanNs;
  host.preempted_reading(cal, t);
  ASSERT_EQ(t.current.max_ticks, 0u);
  host.jump = 250'000;  // 100 us at 2.5 GHz
  host.reading(cal, t);
  EXPECT_EQ(t.current.max_ticks, 0u);
  EXPECT_TRUE(cal.broken());
}

TEST(TscClock, ConcurrentAnchorsAgree) {
  Calibration cal;
  FakeCounter c;
  cal.anchor(c.ticks_at(c.ns0), c.ns0);
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cal, c, t] {
      for (std::uint64_t i = 1; i < 2000; ++i) {
        const std::uint64_t ns = c.ns0 + i * 100'000 + static_cast<std::uint64_t>(t);
        const Anchor a = cal.anchor(c.ticks_at(ns), ns);
        std::uint64_t out = 0;
        if (a.max_ticks && convert(a, c.ticks_at(ns + 500'000), out)) {
          EXPECT_NEAR(static_cast<double>(out), static_cast<double>(ns + 500'000), 5.0);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(cal.broken());
  EXPECT_NE(cal.mult(), 0u);
}

}  // namespace
}  // namespace cushare::shim::tsc
