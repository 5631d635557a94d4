// fakegpu-stat --timeline's placement of changes between two samples: a
// sample taken late (the sampler off the CPU) still dates each change where
// the engine's busy counters put it.
#include "tests/fakegpu/stat/timeline_edges.hpp"

#include <gtest/gtest.h>

namespace fakegpu {
namespace {

constexpr std::uint64_t kUs = 1'000;
constexpr std::int32_t kIdle = -1;
constexpr std::int32_t kP = 0;
constexpr std::int32_t kQ = 1;
constexpr std::int32_t kX = 2;

TimelineSample sample(std::uint64_t now, std::int32_t running, std::vector<std::uint64_t> busy) {
  return {.now_ns = now, .running = running, .busy = std::move(busy)};
}

void expect_edges(const std::vector<TimelineEdge>& got, const std::vector<TimelineEdge>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].at_ns, want[i].at_ns) << "edge " << i;
    EXPECT_EQ(got[i].running, want[i].running) << "edge " << i;
  }
}

TEST(TimelineEdges, AProcessThatStartedBetweenSamplesStartedWhenItsTimeSays) {
  // Sampled 2 ms after the last one, it has run 0.5 ms: it began at 1.5 ms.
  expect_edges(timeline_edges(sample(0, kIdle, {0, 0}), sample(2000 * kUs, kP, {500 * kUs, 0})),
               {{1500 * kUs, kP}});
}

TEST(TimelineEdges, AProcessThatStoppedBetweenSamplesStoppedWhenItsTimeSays) {
  expect_edges(timeline_edges(sample(0, kP, {0, 0}), sample(2000 * kUs, kIdle, {700 * kUs, 0})),
               {{700 * kUs, kIdle}});
}

TEST(TimelineEdges, AHandOffWithAGapShowsTheGap) {
  // P ran 0.5 ms more, Q has run 0.5 ms: idle from 0.5 to 1.5 ms.
  expect_edges(
      timeline_edges(sample(0, kP, {0, 0}), sample(2000 * kUs, kQ, {500 * kUs, 500 * kUs})),
      {{500 * kUs, kIdle}, {1500 * kUs, kQ}});
}

TEST(TimelineEdges, AHandOffWithoutAGapIsOneSwitch) {
  expect_edges(
      timeline_edges(sample(0, kP, {0, 0}), sample(2000 * kUs, kQ, {1200 * kUs, 800 * kUs})),
      {{1200 * kUs, kQ}});
}

TEST(TimelineEdges, WorkThatStartedRightAfterTheLastSampleIsNotGivenToTheProcessBefore) {
  // The late sample that misled a trace: P's work ended at the last sample
  // and Q has run since. Read naively, P ran on for the whole 2 ms.
  expect_edges(timeline_edges(sample(0, kP, {0, 0}), sample(2000 * kUs, kQ, {0, 2000 * kUs})),
               {{0, kQ}});
}

TEST(TimelineEdges, AProcessThatRanOnlyBetweenSamplesIsShownBetweenThem) {
  expect_edges(timeline_edges(sample(0, kP, {0, 0, 0}),
                              sample(2000 * kUs, kIdle, {300 * kUs, 0, 400 * kUs})),
               {{300 * kUs, kX}, {700 * kUs, kIdle}});
}

TEST(TimelineEdges, NoChangeNoEdge) {
  EXPECT_TRUE(timeline_edges(sample(0, kIdle, {5, 5}), sample(100 * kUs, kIdle, {5, 5})).empty());
  EXPECT_TRUE(timeline_edges(sample(0, kP, {0, 0}), sample(100 * kUs, kP, {100 * kUs, 0})).empty());
}

TEST(TimelineEdges, CountersNeverPlaceAChangeOutsideTheInterval) {
  // A counter that moved by more than the interval (a reset, a slot reused
  // by another process) is held to the interval.
  const auto edges =
      timeline_edges(sample(1000 * kUs, kP, {0, 0}), sample(1100 * kUs, kQ, {0, 5000 * kUs}));
  ASSERT_EQ(edges.size(), 1u);
  EXPECT_EQ(edges[0].at_ns, 1000 * kUs);
  EXPECT_EQ(edges[0].running, kQ);
}

}  // namespace
}  // namespace fakegpu
