#include "scheduler/nvml_busy.hpp"

#include <algorithm>
#include <vector>

namespace cushare::sched {

unsigned long long SampleHistory::longest_period_us() const {
  unsigned long long longest = device_period_us != 0 ? device_period_us : kUnseenPeriodUs;
  if (process_period_us != 0) longest = std::min(longest, process_period_us);
  return std::min(longest, kMaxPeriodUs);
}

bool SampleHistory::samples_tile() const {
  return device_period_us != 0 && process_period_us != 0 &&
         process_period_us * 2 < device_period_us * 3;
}

bool SampleHistory::reading_tiles(unsigned long long longest_read_gap_us) const {
  return samples_tile() && longest_read_gap_us < device_period_us;
}

void learn_device_period(std::span<const unsigned long long> stamps_us, SampleHistory& history) {
  std::vector<unsigned long long> fresh;
  for (const auto stamp : stamps_us)
    if (stamp > history.last_device_stamp_us) fresh.push_back(stamp);
  std::sort(fresh.begin(), fresh.end());
  for (const auto stamp : fresh) {
    const unsigned long long gap = stamp - history.last_device_stamp_us;
    if (history.last_device_stamp_us != 0 && gap >= SampleHistory::kMinPeriodUs) {
      history.device_period_us =
          history.device_period_us == 0 ? gap : std::min(history.device_period_us, gap);
    }
    history.last_device_stamp_us = stamp;
  }
}

SampledBusy busy_from_samples(std::span<const nvml::ProcessUtilizationSample> samples,
                              unsigned long long seen_us, SampleHistory& history) {
  std::vector<nvml::ProcessUtilizationSample> fresh;
  for (const auto& s : samples)
    if (s.timeStamp > seen_us) fresh.push_back(s);
  std::sort(fresh.begin(), fresh.end(),
            [](const auto& a, const auto& b) { return a.timeStamp < b.timeStamp; });
  // Each sample's gap since its process's previous one. The period is
  // learned from the whole reading before any gap is cut to it.
  struct Counted {
    std::uint32_t pid;
    unsigned util;
    unsigned long long gap_us;
  };
  std::vector<Counted> counted;
  for (const auto& s : fresh) {
    auto [last, first] = history.last_stamp_us.try_emplace(s.pid, seen_us);
    if (s.timeStamp <= last->second) continue;  // the same sample twice
    const unsigned long long gap = s.timeStamp - last->second;
    if (!first && gap >= SampleHistory::kMinPeriodUs) {
      history.process_period_us =
          history.process_period_us == 0 ? gap : std::min(history.process_period_us, gap);
    }
    last->second = s.timeStamp;
    counted.push_back({s.pid, std::min(s.smUtil, 100u), gap});
  }
  SampledBusy out{.from_us = seen_us, .to_us = fresh.empty() ? seen_us : fresh.back().timeStamp};
  for (const auto& c : counted) {
    const unsigned long long period = std::min(c.gap_us, history.longest_period_us());
    out.busy_ns[c.pid] += static_cast<std::uint64_t>(c.util) * period * 10;  // % of us -> ns
  }
  std::erase_if(history.last_stamp_us, [&](const auto& entry) {
    return entry.second + SampleHistory::kForgetUs < out.to_us;
  });
  return out;
}

unsigned long long idle_stretch_end_us(unsigned long long seen_us, unsigned long long wall_now_us,
                                       unsigned long long period_us) {
  return std::max(seen_us, wall_now_us > period_us ? wall_now_us - period_us : seen_us);
}

std::uint64_t ClockPair::to_monotonic_ns(unsigned long long stamp_us) const {
  const std::uint64_t back = stamp_us < wall_us ? (wall_us - stamp_us) * 1000 : 0;
  return back < monotonic_ns ? monotonic_ns - back : 0;
}

}  // namespace cushare::sched
