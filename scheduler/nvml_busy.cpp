#include "scheduler/nvml_busy.hpp"

#include <algorithm>
#include <vector>

namespace cushare::sched {

SampledBusy busy_from_samples(std::span<const nvml::ProcessUtilizationSample> samples,
                              unsigned long long seen_us) {
  std::vector<nvml::ProcessUtilizationSample> fresh;
  for (const auto& s : samples)
    if (s.timeStamp > seen_us) fresh.push_back(s);
  std::sort(fresh.begin(), fresh.end(),
            [](const auto& a, const auto& b) { return a.timeStamp < b.timeStamp; });
  SampledBusy out{.from_us = seen_us, .to_us = seen_us};
  unsigned long long period_start = seen_us, previous_stamp = seen_us;
  for (const auto& s : fresh) {
    if (s.timeStamp != previous_stamp) {
      period_start = previous_stamp;
      previous_stamp = s.timeStamp;
    }
    const unsigned long long period_us = s.timeStamp - period_start;
    out.busy_ns[s.pid] +=
        static_cast<std::uint64_t>(std::min(s.smUtil, 100u)) * period_us * 10;  // % of us -> ns
    out.to_us = s.timeStamp;
  }
  return out;
}

}  // namespace cushare::sched
