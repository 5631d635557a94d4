// The probe's modes. Each reports through emit() and returns the exit code;
// Driver API failures that the orchestrator must judge (an out-of-memory
// refusal, a refused graph) are reported as data, not as crashes.
#pragma once

#include <cstdint>
#include <string>

#include "scheduler/nvml_reader.hpp"

namespace cushare::gpuprobe {

struct AllocOptions {
  std::uint64_t step_mib = 64;
  std::uint64_t max_mib = 0;  // 0: until the first failure
  bool wait_go = false;       // wait for "go" on stdin before allocating
  int pace_ms = 0;            // pause between steps, so concurrent processes interleave
  bool hold = false;          // keep the memory until "release"
  std::uint64_t spin_ns = 0;  // while holding, keep launching spin kernels of this length
  int inflight = 4;
  double progress_s = 0.1;
};

struct SpinOptions {
  std::uint64_t kernel_ns = 500000;
  double seconds = 5;
  int inflight = 4;
  double progress_s = 0.1;
  bool wait_go = false;
  // A duty cycle instead of a full queue: every `period_ms`, `busy_ms` of
  // kernels back to back, then idle (0: always busy).
  double busy_ms = 0;
  double period_ms = 0;
};

struct LaunchOptions {
  std::uint64_t count = 100000;
  std::uint64_t batch = 256;  // launches timed back to back before a synchronize
};

struct GraphOptions {
  int kernels = 8;  // spin kernels per graph
  std::uint64_t kernel_ns = 200000;
  std::uint64_t alloc_mib = 0;  // graph-owned allocation (alloc, memset, free nodes)
  double seconds = 0;           // then launch the graph repeatedly for this long
  bool wait_go = false;         // after the first launch, wait for "go"
  int inflight = 2;
  double progress_s = 0.1;
};

struct NvmlOptions {
  std::string uuid;  // "" : index 0
};

struct SamplingOptions {
  std::string uuid;  // "" : the first GPU NVML enumerates
  double seconds = 4;
  int interval_ms = 500;  // the daemon's ground-truth interval
  // Between readings, as the daemon gathers samples.
  int collect_ms = static_cast<int>(sched::kNvmlCollectIntervalNs / 1'000'000);
};

int runAlloc(const AllocOptions& o);
int runSpin(const SpinOptions& o);
int runLaunch(const LaunchOptions& o);
int runGraph(const GraphOptions& o);
int runNvml(const NvmlOptions& o);
int runSampling(const SamplingOptions& o);

}  // namespace cushare::gpuprobe
