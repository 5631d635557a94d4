// GPU time per process from NVML's utilisation samples, and the stretch of
// time those samples stand for. Pure: the reader feeds it what
// nvmlDeviceGetProcessUtilization returned.
//
// What a sample stands for is not documented. A sample is a process's
// utilisation over a sampling period ending at its stamp. A driver returns
// only each process's latest sample (an H100 did, one per process per call),
// so the reader gathers them several times a period (NvmlReader::collect_all);
// a period the process spent idle has no sample at all. So a sample is
// read as standing for the time since that process's previous sample, but
// never for more than the GPU's sampling period. That period is learned from
// the device's own utilisation samples (nvmlDeviceGetSamples), which come
// every period, idle or not: the shortest gap between two of them. Where the
// device's samples cannot be had, the shortest gap between two samples of
// one process stands in, at most the shortest period drivers document
// (1/6 s). A gap that spans periods without samples then counts one period,
// not all of them. Misjudged, the period is taken short rather than long:
// GPU time then reads low, which weakens the backstop (and lets a cap's busy
// scale rise, within its bound), rather than high, which would charge an
// honest tenant for time it did not use.
//
// The stretch a reading covers ends at its latest sample, not at the moment
// it was read: whoever compares it with another figure (the scheduler's
// charges) must compare over that same stretch.
#pragma once

#include <cstdint>
#include <map>
#include <span>

#include "shm/nvml_api.hpp"

namespace cushare::sched {

// What a reader learns of one GPU's samples from reading to reading.
struct SampleHistory {
  // Drivers document sampling periods of 1/6 s to 1 s for utilisation:
  // the longest a sample stands for, and the longest before a period is seen.
  static constexpr unsigned long long kMaxPeriodUs = 1'000'000;
  static constexpr unsigned long long kUnseenPeriodUs = 166'667;
  // Gaps shorter than this are not taken for a period (a sample stamped
  // twice, a clock stepped back): learned once, a tiny period would read
  // every process idle for good.
  static constexpr unsigned long long kMinPeriodUs = 20'000;
  // A process without a sample for this long starts afresh.
  static constexpr unsigned long long kForgetUs = 10'000'000;

  // The shortest gap seen between two of the device's samples, and between
  // two samples of one process; 0 until one is.
  unsigned long long device_period_us = 0, process_period_us = 0;
  unsigned long long last_device_stamp_us = 0;                // 0: none yet
  std::map<std::uint32_t, unsigned long long> last_stamp_us;  // per PID

  // The longest a process's sample stands for.
  unsigned long long longest_period_us() const;
  // Whether two samples of one process were seen one device period apart:
  // the reader then sees every period's sample. A reader that misses periods
  // (asking less often than once a period) never sees two samples of one
  // process closer than two periods, and reads GPU time low.
  bool samples_tile() const;
  // Whether one reading's samples tile time: the driver's do, and the reads
  // that gathered them were never a device period or more apart.
  bool reading_tiles(unsigned long long longest_read_gap_us) const;
};

// Learns the device's sampling period from the stamps of its utilisation
// samples newer than history.last_device_stamp_us (any order).
void learn_device_period(std::span<const unsigned long long> stamps_us, SampleHistory& history);

struct SampledBusy {
  std::map<std::uint32_t, std::uint64_t> busy_ns;  // host PID -> GPU time
  // The stretch the samples stand for, in the samples' clock (wall-clock
  // microseconds): from the reading before to the latest sample.
  unsigned long long from_us = 0, to_us = 0;
};

// Samples stamped after `seen_us` (the previous reading's latest); a
// process's first sample stands for the time since `seen_us`, within the
// bounds above. Updates `history`.
SampledBusy busy_from_samples(std::span<const nvml::ProcessUtilizationSample> samples,
                              unsigned long long seen_us, SampleHistory& history);

// Where the stretch of a reading that found no new sample ends: a whole
// period before now (never before `seen_us`), so that a sample the period in
// progress may still bring, for time before now, falls in the next stretch.
unsigned long long idle_stretch_end_us(unsigned long long seen_us, unsigned long long wall_now_us,
                                       unsigned long long period_us);

// Both clocks read at one moment: NVML stamps samples with the wall clock
// (microseconds), the daemon keeps CLOCK_MONOTONIC (nanoseconds).
struct ClockPair {
  std::uint64_t monotonic_ns = 0;
  unsigned long long wall_us = 0;
  // A stamp at or before the pair's moment, on the monotonic clock (a stamp
  // after it reads as the moment itself; none reads before 0).
  std::uint64_t to_monotonic_ns(unsigned long long stamp_us) const;
};

}  // namespace cushare::sched
