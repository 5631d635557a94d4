// The idle time of a gap the CPU's clock did not see (shim/gate/unseen_idle.hpp).
#include "shim/gate/unseen_idle.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace cushare::shim::gate {
namespace {

constexpr std::uint64_t kUs = 1'000;
constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kNoBound = ~std::uint64_t{0};

std::uint64_t slack_of(std::uint64_t gpu_gap_ns) {
  return gpu_gap_ns * kClockDriftPpm / 1'000'000 + kTimestampSlackNs;
}

TEST(UnseenIdle, TheGpuClocksGapBeyondWhatTheCpuSawIsIdleLessTheSlack) {
  // A sync loop: the CPU saw 20 µs of a 60 µs gap (the completion reached
  // it 25 µs late, the next launch the GPU 15 µs after it began).
  EXPECT_EQ(unseen_idle_ns(60 * kUs, 20 * kUs, kNoBound), 40 * kUs - slack_of(60 * kUs));
}

TEST(UnseenIdle, AWaitBehindAnotherContextCountsWhole) {
  // The spell began 1 ms after the CPU saw the last one end, and its
  // context reached the GPU 3 ms after that (another context's kernel).
  const std::uint64_t gap = 4 * kMs + 10 * kUs;
  EXPECT_EQ(unseen_idle_ns(gap, 1 * kMs, kNoBound), gap - slack_of(gap) - 1 * kMs);
  EXPECT_GT(unseen_idle_ns(gap, 1 * kMs, kNoBound), 3 * kMs);
}

TEST(UnseenIdle, NeverMoreThanTheGpusGapNorBelowZero) {
  for (std::uint64_t gap : {0 * kUs, 1 * kUs, 2 * kUs, 3 * kUs, 50 * kUs, 5 * kMs, kGapSpanNs}) {
    for (std::uint64_t seen : {0 * kUs, 1 * kUs, gap / 2, gap, gap + 1 * kMs}) {
      const std::uint64_t idle = unseen_idle_ns(gap, seen, kNoBound);
      EXPECT_LE(idle + seen, std::max(gap, seen)) << gap << " " << seen;
      if (seen >= gap) {
        EXPECT_EQ(idle, 0u);
      }
    }
  }
}

TEST(UnseenIdle, TheSlackCoversTheDriftOfTheSpanAndTheResolution) {
  EXPECT_EQ(unseen_idle_ns(kTimestampSlackNs, 0, kNoBound), 0u);  // a gap within the resolution
  EXPECT_EQ(unseen_idle_ns(50 * kMs, 0, kNoBound), 50 * kMs - 50 * kUs - kTimestampSlackNs);
}

TEST(UnseenIdle, TheCpusClockBoundsAMisdatedGap) {
  // The GPU's timestamps put 5 ms between two events the CPU saw 1 ms apart
  // at most (recorded, then seen complete): 1 ms counts, less what the CPU
  // counted already.
  EXPECT_EQ(unseen_idle_ns(5 * kMs, 200 * kUs, 1 * kMs), 800 * kUs);
  EXPECT_EQ(unseen_idle_ns(5 * kMs, 1 * kMs, 1 * kMs), 0u);
  EXPECT_EQ(unseen_idle_ns(5 * kMs, 0, 0), 0u);  // no bound known
}

TEST(UnseenIdle, AGapPastTheSpanSaysNothing) {
  EXPECT_EQ(unseen_idle_ns(kGapSpanNs + 1, 0, kNoBound), 0u);
  EXPECT_GT(unseen_idle_ns(kGapSpanNs, 0, kNoBound), 0u);
}

}  // namespace
}  // namespace cushare::shim::gate
