// GPU time per process from NVML's utilisation samples, and the stretch of
// time those samples stand for. A driver samples each process once per
// sampling period and stamps the sample at the period's end; the periods
// tile time. The stretch a reading covers therefore ends at its latest
// sample, not at the moment it was read: whoever compares it with another
// figure (the scheduler's charges) must compare over that same stretch.
// Pure: the reader feeds it what nvmlDeviceGetProcessUtilization returned.
#pragma once

#include <cstdint>
#include <map>
#include <span>

#include "shm/nvml_api.hpp"

namespace cushare::sched {

struct SampledBusy {
  std::map<std::uint32_t, std::uint64_t> busy_ns;  // host PID -> GPU time
  // The stretch the samples stand for, in the samples' clock (wall-clock
  // microseconds): from the reading before to the latest sample.
  unsigned long long from_us = 0, to_us = 0;
};

// Samples stamped after `seen_us` (the previous reading's latest), each
// standing for its process's utilisation over the period from the
// previous distinct stamp (or `seen_us`) to its own.
SampledBusy busy_from_samples(std::span<const nvml::ProcessUtilizationSample> samples,
                              unsigned long long seen_us);

}  // namespace cushare::sched
