// What a measured call took, from the samples around it: the process's
// NVML figure (or the device's free memory), less what its own charges and
// its pools' reservations moved meanwhile.
#include "shim/accounting/overhead_estimate.hpp"

#include <gtest/gtest.h>

namespace cushare::shim {
namespace {

constexpr std::uint64_t MiB = 1 << 20;

MemorySample process(std::uint64_t used, std::uint64_t tracked, std::uint64_t pools) {
  MemorySample s;
  s.nvml = s.process_known = s.tracked_known = s.pools_known = true;
  s.process_used = used;
  s.tracked = tracked;
  s.pools = pools;
  return s;
}

std::uint64_t estimate(const MemorySample& before, const MemorySample& after) {
  std::uint64_t took = 12345;
  EXPECT_TRUE(estimate_overhead(before, after, took));
  return took;
}

TEST(OverheadEstimate, IsWhatTheProcessGrewBy) {
  EXPECT_EQ(estimate(process(1000 * MiB, 700 * MiB, 0), process(1300 * MiB, 700 * MiB, 0)),
            300 * MiB);
}

TEST(OverheadEstimate, AProcessNotListedBeforeHadNothing) {
  MemorySample before;
  before.nvml = true;
  EXPECT_EQ(estimate(before, process(300 * MiB, 0, 0)), 300 * MiB);
}

TEST(OverheadEstimate, LeavesOutWhatTheProcessCharged) {
  // Another thread's 64 MiB allocation, charged and made inside the window.
  EXPECT_EQ(estimate(process(1000 * MiB, 700 * MiB, 0), process(1364 * MiB, 764 * MiB, 0)),
            300 * MiB);
}

TEST(OverheadEstimate, LeavesOutWhatThePoolsGaveBack) {
  // A synchronisation gave 500 MiB of pool memory back to the device inside
  // the window, more than the context took: the process shrank.
  EXPECT_EQ(
      estimate(process(1000 * MiB, 700 * MiB, 600 * MiB), process(800 * MiB, 700 * MiB, 100 * MiB)),
      300 * MiB);
  // And a graph launch grew the graph memory pool by 64 MiB.
  EXPECT_EQ(estimate(process(1000 * MiB, 700 * MiB, 0), process(1364 * MiB, 700 * MiB, 64 * MiB)),
            300 * MiB);
}

TEST(OverheadEstimate, UsesTheDevicesFreeMemoryWithoutTheProcessFigure) {
  MemorySample before, after;
  before.nvml = after.nvml = before.device_known = after.device_known = true;
  before.device_free = 10'000 * MiB;
  after.device_free = 9'700 * MiB;
  EXPECT_EQ(estimate(before, after), 300 * MiB);
}

TEST(OverheadEstimate, NeverGoesBelowZero) {
  EXPECT_EQ(estimate(process(1000 * MiB, 700 * MiB, 0), process(900 * MiB, 700 * MiB, 0)), 0u);
}

TEST(OverheadEstimate, CannotBeToldWithoutNvml) {
  std::uint64_t took = 0;
  EXPECT_FALSE(estimate_overhead(MemorySample{}, MemorySample{}, took));
}

}  // namespace
}  // namespace cushare::shim
