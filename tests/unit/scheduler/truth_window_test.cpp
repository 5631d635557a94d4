// Ground truth's stretch: NVML's samples and the scheduler's charges read
// over the same stretch of time (pure parts).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "scheduler/charge_history.hpp"
#include "scheduler/nvml_busy.hpp"

namespace cushare::sched {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

nvml::ProcessUtilizationSample sample(unsigned pid, unsigned long long stamp_us, unsigned util) {
  return {
      .pid = pid, .timeStamp = stamp_us, .smUtil = util, .memUtil = 0, .encUtil = 0, .decUtil = 0};
}

TEST(BusyFromSamples, EachSampleStandsForThePeriodSinceThePreviousStamp) {
  const std::vector samples = {sample(7, 1'200'000, 50), sample(8, 1'100'000, 20),
                               sample(7, 1'100'000, 30), sample(7, 900'000, 100)};
  const SampledBusy b = busy_from_samples(samples, 1'000'000);
  // The sample stamped before the previous reading's latest is not counted
  // again; the others stand for 100 ms each.
  EXPECT_EQ(b.busy_ns.at(7), 30 * kMs + 50 * kMs);
  EXPECT_EQ(b.busy_ns.at(8), 20 * kMs);
  EXPECT_EQ(b.from_us, 1'000'000u);
  EXPECT_EQ(b.to_us, 1'200'000u);
}

TEST(BusyFromSamples, NoFreshSampleCoversNothing) {
  const std::vector samples = {sample(7, 900'000, 100)};
  const SampledBusy b = busy_from_samples(samples, 1'000'000);
  EXPECT_TRUE(b.busy_ns.empty());
  EXPECT_EQ(b.to_us, b.from_us);
  // A utilisation past 100 % is read as 100 %.
  const std::vector odd = {sample(7, 1'100'000, 250)};
  EXPECT_EQ(busy_from_samples(odd, 1'000'000).busy_ns.at(7), 100 * kMs);
}

TEST(ChargeHistory, ReadsTheChargeBetweenAnyTwoMomentsAccruedEvenlyBetweenMarks) {
  ChargeHistory h;
  EXPECT_EQ(h.charged(0, 100 * kMs), 0);
  h.record(1000 * kMs, {1, 0});
  h.record(1100 * kMs, {1, 30 * kMs});
  h.record(1200 * kMs, {1, 60 * kMs});
  EXPECT_EQ(h.charged(1000 * kMs, 1200 * kMs), static_cast<std::int64_t>(60 * kMs));
  EXPECT_EQ(h.charged(1050 * kMs, 1150 * kMs), static_cast<std::int64_t>(30 * kMs));
  // Before the oldest mark and after the newest the charge stands still.
  EXPECT_EQ(h.charged(500 * kMs, 1100 * kMs), static_cast<std::int64_t>(30 * kMs));
  EXPECT_EQ(h.charged(1150 * kMs, 9000 * kMs), static_cast<std::int64_t>(15 * kMs));
  EXPECT_EQ(h.charged(1150 * kMs, 1150 * kMs), 0);
}

TEST(ChargeHistory, RefundsReadNegativeAndAComebackCountsFromTheMarkBefore) {
  ChargeHistory h;
  h.record(1000 * kMs, {1, 300 * kMs});
  h.record(1100 * kMs, {1, 280 * kMs});  // a refund took 20 ms back
  EXPECT_EQ(h.charged(1000 * kMs, 1100 * kMs), -static_cast<std::int64_t>(20 * kMs));
  h.record(1200 * kMs, {2, 40 * kMs});  // left and came back in between
  EXPECT_EQ(h.charged(1100 * kMs, 1200 * kMs), static_cast<std::int64_t>(40 * kMs));
  EXPECT_EQ(h.charged(1150 * kMs, 1200 * kMs), static_cast<std::int64_t>(20 * kMs));
  EXPECT_EQ(h.charged(1000 * kMs, 1200 * kMs), static_cast<std::int64_t>(40 * kMs));
}

TEST(ChargeHistory, KeepsMarksApartAndTheNewestCurrentAndForgetsTheOldest) {
  ChargeHistory h;
  h.record(0, {1, 0});
  // Within the spacing of the mark before, the newest is replaced.
  for (std::uint64_t t = 1; t <= 30; ++t) h.record(t * kMs, {1, t * kMs});
  EXPECT_EQ(h.charged(0, 30 * kMs), static_cast<std::int64_t>(30 * kMs));
  EXPECT_EQ(h.charged(0, 15 * kMs), static_cast<std::int64_t>(15 * kMs));
  // Many seconds later the oldest marks are gone: the charge before the
  // oldest kept reads as that mark.
  for (std::uint64_t t = 31; t <= 20'000; ++t) h.record(t * kMs, {1, t * kMs});
  const std::uint64_t kept = ChargeHistory::kCapacity * ChargeHistory::kSpacingNs;
  EXPECT_EQ(h.charged(20'000 * kMs - kept / 2, 20'000 * kMs), static_cast<std::int64_t>(kept / 2));
  EXPECT_LT(h.charged(0, 20'000 * kMs), static_cast<std::int64_t>(kept));
}

// A tenant charged at a steady 30 %, sampled as a driver does (a sample per
// 100 ms period, stamped at its end, here appearing 5 ms after it) and read
// about every 500 ms, 12 ms early or late by turns: over the samples'
// stretch the charge agrees with the truth in every window; from one
// reading's moment to the next it was off by a period's worth or more
// (6 periods in one window, 4 in the next).
TEST(TruthWindow, ChargesReadOverTheSamplesStretchAgreeWithTheSamples) {
  ChargeHistory h;
  constexpr std::uint64_t kT0 = 10'000 * kMs, kPeriod = 100 * kMs, kRead = 500 * kMs;
  auto charge_at = [&](std::uint64_t t) { return (t - kT0) * 3 / 10; };
  std::vector<nvml::ProcessUtilizationSample> driver;
  unsigned long long seen_us = kT0 / 1000;
  std::uint64_t last_read = kT0;
  unsigned readings = 0;
  double worst_aligned = 0, worst_read_to_read = 0;
  for (std::uint64_t t = kT0 + kMs; t <= kT0 + 10'000 * kMs; t += kMs) {
    h.record(t, {1, charge_at(t)});
    if ((t - kT0) % kPeriod == 5 * kMs) driver.push_back(sample(7, (t - 5 * kMs) / 1000, 30));
    const std::uint64_t n = (t - kT0 + kRead / 2) / kRead;
    const std::uint64_t read_at = kT0 + n * kRead + 12 * kMs - (n % 2 ? 0 : 24 * kMs);
    if (t != read_at) continue;
    const SampledBusy b = busy_from_samples(driver, seen_us);
    const double truth = static_cast<double>(b.busy_ns.at(7));
    const double aligned = static_cast<double>(h.charged(b.from_us * 1000, b.to_us * 1000));
    const double read_to_read = static_cast<double>(charge_at(t) - charge_at(last_read));
    seen_us = b.to_us;
    last_read = t;
    if (++readings < 2) continue;  // the first stretch starts at the reader's start
    worst_aligned = std::max(worst_aligned, std::abs(aligned - truth) / truth);
    worst_read_to_read = std::max(worst_read_to_read, std::abs(read_to_read - truth) / truth);
  }
  EXPECT_GE(readings, 18u);
  EXPECT_LT(worst_aligned, 0.01);
  EXPECT_GT(worst_read_to_read, 0.15);  // what reading from moment to moment got wrong
}

}  // namespace
}  // namespace cushare::sched
