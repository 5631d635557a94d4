// Ground truth's stretch: NVML's samples and the scheduler's charges read
// over the same stretch of time (pure parts).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
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

TEST(BusyFromSamples, EachSampleStandsForTheTimeSinceItsProcesssPreviousOne) {
  SampleHistory history;
  const std::vector samples = {sample(7, 1'200'000, 50), sample(8, 1'150'000, 20),
                               sample(7, 1'100'000, 30), sample(7, 900'000, 100)};
  const SampledBusy b = busy_from_samples(samples, 1'000'000, history);
  // The sample stamped before the previous reading's latest is not counted
  // again. A process's first sample stands for the time since that
  // reading, later ones for the time since its own previous sample, and
  // none for more than the period learned (100 ms, from process 7's two).
  EXPECT_EQ(b.busy_ns.at(7), 30 * kMs + 50 * kMs);
  EXPECT_EQ(b.busy_ns.at(8), 20 * kMs);
  EXPECT_EQ(history.process_period_us, 100'000u);
  EXPECT_EQ(b.from_us, 1'000'000u);
  EXPECT_EQ(b.to_us, 1'200'000u);
}

TEST(BusyFromSamples, PeriodsWithoutSamplesAreNotCountedAsBusy) {
  // A driver's sample per 100 ms period, none for periods a process spent
  // idle: 10 ms busy in two periods of every five. Read every 500 ms, the
  // gaps across the idle periods count one period each, not four.
  SampleHistory history;
  unsigned long long seen = 1'000'000;
  std::uint64_t total = 0;
  for (unsigned long long reading = 1; reading <= 6; ++reading) {
    const unsigned long long base = 1'000'000 + (reading - 1) * 500'000;
    const std::vector samples = {sample(7, base + 100'000, 10), sample(7, base + 200'000, 10)};
    const SampledBusy b = busy_from_samples(samples, seen, history);
    seen = b.to_us;
    EXPECT_EQ(b.busy_ns.at(7), 20 * kMs) << "reading " << reading;
    total += b.busy_ns.at(7);
  }
  EXPECT_EQ(history.process_period_us, 100'000u);
  EXPECT_EQ(total, 6 * 20 * kMs);
}

TEST(BusyFromSamples, OneSamplePerReadingStandsForTheWholeReadingWhereTheDeviceSaysSo) {
  // A driver that answers each reading with one sample per process over
  // the time since lastSeen, its device sampled every 500 ms too.
  SampleHistory history;
  const std::vector<unsigned long long> device = {1'000'000, 1'500'000, 2'000'000};
  learn_device_period(device, history);
  EXPECT_EQ(history.device_period_us, 500'000u);
  unsigned long long seen = 1'000'000;
  for (unsigned long long reading = 1; reading <= 4; ++reading) {
    const std::vector samples = {sample(7, 1'000'000 + reading * 500'000, 30)};
    const SampledBusy b = busy_from_samples(samples, seen, history);
    seen = b.to_us;
    EXPECT_EQ(b.busy_ns.at(7), 150 * kMs) << "reading " << reading;
  }
}

TEST(BusyFromSamples, ABurstInOnePeriodOfManyIsNotReadAsBusyThroughAll) {
  // 10 ms of work in one 100 ms period of every five, the others without
  // samples, read every 500 ms. The process's own gaps say 500 ms; the
  // device's samples (every period, idle or not) say 100 ms, and the bursts
  // read exactly. Without the device's samples a burst stands for 1/6 s at
  // most: read high by two thirds, not five times.
  for (const bool device_sampled : {true, false}) {
    SampleHistory history;
    unsigned long long seen = 1'000'000;
    for (unsigned long long reading = 1; reading <= 4; ++reading) {
      const unsigned long long end = 1'000'000 + reading * 500'000;
      if (device_sampled) {
        std::vector<unsigned long long> device;
        for (unsigned long long t = end - 400'000; t <= end; t += 100'000) device.push_back(t);
        learn_device_period(device, history);
      }
      const std::vector samples = {sample(7, end, 10)};
      const SampledBusy b = busy_from_samples(samples, seen, history);
      seen = b.to_us;
      EXPECT_EQ(b.busy_ns.at(7), device_sampled ? 10 * kMs : 16'666'700u)
          << "reading " << reading << (device_sampled ? " with" : " without")
          << " the device's samples";
    }
  }
}

TEST(SamplesTile, OnlyWhereOneProcesssSamplesWereSeenOneDevicePeriodApart) {
  // An H100 (driver 580) read every 500 ms: device samples every 200 ms, and
  // each reading one sample per process, its latest, so a process's samples
  // came 400 or 600 ms apart. Read so, a process busy half the time showed
  // 40 % of its GPU time, and the reader must say its samples do not tile.
  SampleHistory missed;
  unsigned long long seen = 1'000'000;
  std::uint64_t total = 0;
  for (unsigned long long reading = 1; reading <= 10; ++reading) {
    const unsigned long long now = 1'000'000 + reading * 500'000;
    std::vector<unsigned long long> device;
    for (unsigned long long t = now - 500'000 + 200'000 - (now - 500'000) % 200'000; t <= now;
         t += 200'000)
      device.push_back(t);
    learn_device_period(device, missed);
    const std::vector samples = {sample(7, device.back(), 50)};
    const SampledBusy b = busy_from_samples(samples, seen, missed);
    seen = b.to_us;
    total += b.busy_ns.at(7);
  }
  EXPECT_EQ(missed.device_period_us, 200'000u);
  EXPECT_EQ(missed.process_period_us, 400'000u);
  EXPECT_FALSE(missed.samples_tile());
  EXPECT_EQ(total, 10 * 100 * kMs) << "a period of every two and a half";

  // Gathered several times a period, every period's sample is seen.
  SampleHistory gathered;
  seen = 1'000'000;
  total = 0;
  for (unsigned long long reading = 1; reading <= 10; ++reading) {
    const unsigned long long now = 1'000'000 + reading * 500'000;
    std::vector<unsigned long long> device;
    std::vector<nvml::ProcessUtilizationSample> samples;
    for (unsigned long long t = now - 500'000 + 200'000 - (now - 500'000) % 200'000; t <= now;
         t += 200'000) {
      device.push_back(t);
      samples.push_back(sample(7, t, 50));
    }
    learn_device_period(device, gathered);
    const SampledBusy b = busy_from_samples(samples, seen, gathered);
    seen = b.to_us;
    total += b.busy_ns.at(7);
  }
  EXPECT_TRUE(gathered.samples_tile());
  // Judged per reading: gathered every 40 ms it tiles; with two reads a
  // whole period apart (a starved collector) it may have missed one.
  EXPECT_TRUE(gathered.reading_tiles(40'000));
  EXPECT_FALSE(gathered.reading_tiles(200'000));
  EXPECT_FALSE(missed.reading_tiles(0));
  EXPECT_EQ(total, 50 * (seen - 1'000'000) * 10) << "half of the stretch, to the nanosecond";

  // Without the device's samples nothing says so.
  SampleHistory unknown{.process_period_us = 100'000};
  EXPECT_FALSE(unknown.samples_tile());
}

TEST(LearnDevicePeriod, TheShortestGapBetweenTheDevicesSamplesAcrossReadings) {
  SampleHistory history;
  const std::vector<unsigned long long> first = {1'300'000, 1'100'000};
  learn_device_period(first, history);
  EXPECT_EQ(history.device_period_us, 200'000u);
  EXPECT_EQ(history.last_device_stamp_us, 1'300'000u);
  // Older stamps are not taken again; a gap across two readings counts.
  const std::vector<unsigned long long> second = {1'200'000, 1'450'000};
  learn_device_period(second, history);
  EXPECT_EQ(history.device_period_us, 150'000u);
  EXPECT_EQ(history.longest_period_us(), 150'000u);
  // A sample stamped twice (a microsecond apart) or a clock stepped back
  // teaches nothing: a tiny period would read every process idle for good.
  const std::vector<unsigned long long> twice = {1'450'001, 1'600'001};
  learn_device_period(twice, history);
  EXPECT_EQ(history.device_period_us, 150'000u);
  // A process's own shorter gap bounds it too; nothing stands for over 1 s.
  history.process_period_us = 120'000;
  EXPECT_EQ(history.longest_period_us(), 120'000u);
  SampleHistory slow{.device_period_us = 5'000'000};
  EXPECT_EQ(slow.longest_period_us(), SampleHistory::kMaxPeriodUs);
}

TEST(BusyFromSamples, NoFreshSampleCoversNothingAndOddFiguresAreBounded) {
  SampleHistory history;
  const std::vector samples = {sample(7, 900'000, 100)};
  const SampledBusy b = busy_from_samples(samples, 1'000'000, history);
  EXPECT_TRUE(b.busy_ns.empty());
  EXPECT_EQ(b.to_us, b.from_us);
  // A utilisation past 100 % is read as 100 %, a sample given twice counts
  // once, and before any period is seen a sample stands for at most 1/6 s.
  const std::vector odd = {sample(8, 3'500'000, 250), sample(8, 3'500'000, 250)};
  EXPECT_EQ(busy_from_samples(odd, 1'000'000, history).busy_ns.at(8), 166'667'000u);
  // However long the period learned, no sample stands for more than 1 s.
  const std::vector sparse = {sample(8, 6'500'000, 100)};
  history.device_period_us = 3'000'000;
  history.process_period_us = 3'000'000;
  EXPECT_EQ(busy_from_samples(sparse, 3'500'000, history).busy_ns.at(8), 1000 * kMs);
  // A process not sampled for a long while is forgotten.
  const std::vector later = {sample(9, 20'000'000, 1)};
  busy_from_samples(later, 3'500'000, history);
  EXPECT_FALSE(history.last_stamp_us.contains(8));
  EXPECT_TRUE(history.last_stamp_us.contains(9));
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
  EXPECT_FALSE(h.covers(0));
  EXPECT_TRUE(h.empty());
  h.record(0, {1, 0});
  EXPECT_FALSE(h.empty());
  EXPECT_TRUE(h.covers(0));
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
  EXPECT_FALSE(h.covers(0));
  EXPECT_TRUE(h.covers(20'000 * kMs - kept / 2));
  // A second mark at the newest's own moment replaces it.
  h.record(20'000 * kMs, {1, 20'010 * kMs});
  EXPECT_EQ(h.charged(20'000 * kMs - 20 * kMs, 20'000 * kMs), static_cast<std::int64_t>(30 * kMs));
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
  SampleHistory history;
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
    const SampledBusy b = busy_from_samples(driver, seen_us, history);
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

TEST(JudgedStretch, TheStretchOfTheGpuThatChargedTheTenantElseAny) {
  ChargeHistory h;
  h.record(1'000 * kMs, {1, 0});
  const std::map<std::string, Stretch> two{{"GPU-a", {1'100 * kMs, 1'600 * kMs}},
                                           {"GPU-b", {1'200 * kMs, 1'700 * kMs}}};
  EXPECT_EQ(judged_stretch(two, "GPU-b", h)->from_ns, 1'200 * kMs);
  EXPECT_EQ(judged_stretch(two, "GPU-a", h)->to_ns, 1'600 * kMs);
  // A '*' entry whose GPU is not known yet, or one NVML did not answer for.
  EXPECT_EQ(judged_stretch(two, "", h)->from_ns, 1'100 * kMs);
  EXPECT_FALSE(judged_stretch({}, "GPU-a", h));
}

TEST(JudgedStretch, NothingNewOrAStretchFromBeforeTheChargesKeptIsNotJudged) {
  ChargeHistory h;
  h.record(1'000 * kMs, {1, 0});
  EXPECT_FALSE(judged_stretch({{"GPU-a", {1'500 * kMs, 1'500 * kMs}}}, "GPU-a", h));
  EXPECT_FALSE(judged_stretch({{"GPU-a", {1'500 * kMs, 1'400 * kMs}}}, "GPU-a", h));
  // It joined partway through: its first charges would read short.
  EXPECT_FALSE(judged_stretch({{"GPU-a", {900 * kMs, 1'400 * kMs}}}, "GPU-a", h));
  EXPECT_TRUE(judged_stretch({{"GPU-a", {1'000 * kMs, 1'400 * kMs}}}, "GPU-a", h));
  // Never charged at all: judged, against nothing.
  const auto never = judged_stretch({{"GPU-a", {900 * kMs, 1'400 * kMs}}}, "GPU-a", {});
  ASSERT_TRUE(never);
  EXPECT_EQ(ChargeHistory{}.charged(never->from_ns, never->to_ns), 0);
}

TEST(ClockPair, StampsMapToTheMonotonicClockByTheirDistanceFromThePairsMoment) {
  const ClockPair c{.monotonic_ns = 50'000 * kMs, .wall_us = 1'700'000'000'000'000ull};
  EXPECT_EQ(c.to_monotonic_ns(c.wall_us), 50'000 * kMs);
  EXPECT_EQ(c.to_monotonic_ns(c.wall_us - 250'000), 49'750 * kMs);
  // A stamp ahead of the pair (the wall clock stepped back since) is now;
  // one from before the monotonic clock's start is its start.
  EXPECT_EQ(c.to_monotonic_ns(c.wall_us + 5'000), 50'000 * kMs);
  EXPECT_EQ(c.to_monotonic_ns(0), 0u);
}

TEST(IdleStretchEnd, AWholePeriodBeforeNowNeverBeforeTheLastSample) {
  EXPECT_EQ(idle_stretch_end_us(1'000'000, 2'000'000, 100'000), 1'900'000u);
  EXPECT_EQ(idle_stretch_end_us(1'950'000, 2'000'000, 100'000), 1'950'000u);
  EXPECT_EQ(idle_stretch_end_us(0, 50'000, 100'000), 0u);
}

}  // namespace
}  // namespace cushare::sched
