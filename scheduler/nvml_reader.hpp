// What NVML reports per process — device memory (the driver's own figure,
// context and module overhead included) and GPU utilisation — for the
// daemon's ground truth. Loaded with dlopen so the daemon runs, without
// overhead reconciliation or the ground-truth backstop, on machines without a
// GPU driver.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/nvml_busy.hpp"
#include "shm/nvml_api.hpp"

namespace cushare::sched {

// How often NvmlReader::collect_all gathers samples between readings: several
// times within the shortest sampling period drivers document (1/6 s).
inline constexpr std::uint64_t kNvmlCollectIntervalNs = 40'000'000;

class NvmlReader {
 public:
  NvmlReader();  // dlopen("libnvidia-ml.so.1") + nvmlInit_v2; available() says if it worked
  ~NvmlReader();
  NvmlReader(const NvmlReader&) = delete;
  NvmlReader& operator=(const NvmlReader&) = delete;

  bool available() const { return init_ok_; }
  // host PID -> used bytes of every compute process on the GPU with this
  // UUID; nullopt when NVML cannot answer.
  std::optional<std::map<std::uint32_t, std::uint64_t>> process_memory(const std::string& uuid);
  // The UUIDs of every GPU NVML enumerates ("GPU-..."); empty when it cannot.
  std::vector<std::string> gpu_uuids();
  // GPU time each process used on a GPU, from nvmlDeviceGetProcessUtilization
  // samples (utilisation x sample period), over the stretch the samples
  // stand for: from the previous call's latest sample to this one's.
  struct ProcessBusy {
    std::map<std::uint32_t, std::uint64_t> busy_ns;  // host PID -> GPU time
    std::uint64_t from_ns = 0, to_ns = 0;            // the stretch, monotonic ns
    // Whether this stretch's samples tile time: the driver's samples were
    // seen to (SampleHistory::samples_tile), and no two of the reads that
    // gathered them were a sampling period apart. Otherwise the figures may
    // be low by the periods missed.
    bool samples_tile = false;
  };
  // The first call for a GPU only sets the starting point (an empty
  // stretch). nullopt when NVML cannot answer.
  std::optional<ProcessBusy> process_busy(const std::string& uuid);
  // Between two process_busy calls: keeps the processes' samples that came
  // since the last call, for every GPU process_busy has started. The driver
  // returns only each process's latest sample, so the daemon calls this
  // several times per sampling period, from a thread of its own (an NVML
  // call can take a millisecond, and the scheduling loop polls hand-offs
  // every 50 us). The reader's calls are serialised.
  void collect_all();

 private:
  void* lib_ = nullptr;
  bool init_ok_ = false;
  nvml::DeviceGetHandleByUuidFn get_handle_by_uuid_ = nullptr;
  nvml::DeviceGetProcessesFn get_processes_ = nullptr;  // _v3, else _v2
  nvml::DeviceGetCountFn get_count_ = nullptr;
  nvml::DeviceGetHandleByIndexFn get_handle_by_index_ = nullptr;
  nvml::DeviceGetStringFn get_uuid_ = nullptr;
  nvml::DeviceGetProcessUtilizationFn get_process_utilization_ = nullptr;
  nvml::DeviceGetSamplesFn get_samples_ = nullptr;
  nvml::ShutdownFn shutdown_ = nullptr;
  struct GpuSampling {
    unsigned long long seen_us = 0;  // where the next stretch starts
    SampleHistory history;
    std::vector<nvml::ProcessUtilizationSample> pending;  // collected since
    // The wall-clock moment of the last read that NVML answered, and the
    // longest gap between two such reads since the last process_busy.
    unsigned long long last_read_us = 0, longest_read_gap_us = 0;
  };
  std::mutex mu_;  // the reader's state and calls: collect_all() has a thread of its own
  std::map<std::string, GpuSampling> sampling_;  // per GPU UUID
  // Bounds what a GPU's collects keep between readings.
  static constexpr std::size_t kMaxPending = 4096;

  void learn_sampling_period(nvml::Device dev, SampleHistory& history);
  // Appends the samples newer than g.seen_us that g.pending does not hold
  // yet, and notes the read's moment; returns NVML's status.
  int read_process_samples(nvml::Device dev, GpuSampling& g);
};

// Context overhead to charge a process: what NVML says it uses minus what
// the shim tracked for it; never negative.
inline std::uint64_t measured_overhead(std::uint64_t nvml_used, std::uint64_t tracked) {
  return nvml_used > tracked ? nvml_used - tracked : 0;
}

}  // namespace cushare::sched
