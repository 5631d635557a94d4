#include "scheduler/nvml_reader.hpp"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "scheduler/nvml_busy.hpp"
#include "shm/clock.hpp"

namespace cushare::sched {
namespace {

using nvml::Device;
using nvml::kErrorInsufficientSize;
using nvml::kErrorNotFound;
using nvml::kSuccess;
using nvml::symbol;

unsigned long long wall_us() {
  return shm::realtime_ns() / 1000;
}

}  // namespace

NvmlReader::NvmlReader() {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    spdlog::info("NVML not available ({}); context overhead stays the shims' estimate", dlerror());
    return;
  }
  const auto init = symbol<nvml::InitFn>(lib_, "nvmlInit_v2");
  get_handle_by_uuid_ = symbol<nvml::DeviceGetHandleByUuidFn>(lib_, "nvmlDeviceGetHandleByUUID");
  get_processes_ =
      symbol<nvml::DeviceGetProcessesFn>(lib_, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (!get_processes_) {
    get_processes_ =
        symbol<nvml::DeviceGetProcessesFn>(lib_, "nvmlDeviceGetComputeRunningProcesses_v2");
  }
  shutdown_ = symbol<nvml::ShutdownFn>(lib_, "nvmlShutdown");
  get_count_ = symbol<nvml::DeviceGetCountFn>(lib_, "nvmlDeviceGetCount_v2");
  get_handle_by_index_ =
      symbol<nvml::DeviceGetHandleByIndexFn>(lib_, "nvmlDeviceGetHandleByIndex_v2");
  get_uuid_ = symbol<nvml::DeviceGetStringFn>(lib_, "nvmlDeviceGetUUID");
  get_process_utilization_ =
      symbol<nvml::DeviceGetProcessUtilizationFn>(lib_, "nvmlDeviceGetProcessUtilization");
  get_samples_ = symbol<nvml::DeviceGetSamplesFn>(lib_, "nvmlDeviceGetSamples");
  if (!init || !get_handle_by_uuid_ || !get_processes_) {
    spdlog::warn("NVML lacks the functions the daemon needs; no overhead reconciliation");
    return;
  }
  const int rc = init();
  init_ok_ = rc == kSuccess;
  if (!init_ok_) spdlog::warn("nvmlInit_v2 failed ({}); no overhead reconciliation", rc);
}

NvmlReader::~NvmlReader() {
  if (init_ok_ && shutdown_) shutdown_();
  if (lib_) dlclose(lib_);
}

std::optional<std::map<std::uint32_t, std::uint64_t>> NvmlReader::process_memory(
    const std::string& uuid) {
  std::lock_guard lock(mu_);
  if (!init_ok_) return std::nullopt;
  Device dev = nullptr;
  if (get_handle_by_uuid_(uuid.c_str(), &dev) != kSuccess) return std::nullopt;
  std::vector<nvml::ProcessInfo> infos(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = static_cast<unsigned int>(infos.size());
    const int rc = get_processes_(dev, &count, infos.data());
    if (rc == kErrorInsufficientSize) {
      infos.resize(std::max<std::size_t>(count + 16, infos.size() * 2));
      continue;
    }
    if (rc != kSuccess) return std::nullopt;
    std::map<std::uint32_t, std::uint64_t> out;
    for (unsigned int i = 0; i < count && i < infos.size(); ++i) {
      out[infos[i].pid] += infos[i].usedGpuMemory;
    }
    return out;
  }
  return std::nullopt;
}

std::vector<std::string> NvmlReader::gpu_uuids() {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  if (!init_ok_ || !get_count_ || !get_handle_by_index_ || !get_uuid_) return out;
  unsigned int count = 0;
  if (get_count_(&count) != kSuccess) return out;
  for (unsigned int i = 0; i < count; ++i) {
    Device dev = nullptr;
    char uuid[nvml::kDeviceUuidBufferSize] = {};
    if (get_handle_by_index_(i, &dev) != kSuccess || get_uuid_(dev, uuid, sizeof uuid) != kSuccess)
      continue;
    out.emplace_back(uuid);
  }
  return out;
}

int NvmlReader::read_process_samples(Device dev, GpuSampling& g) {
  std::vector<nvml::ProcessUtilizationSample> samples(64);
  unsigned int count = 0;
  int rc = kErrorInsufficientSize;
  for (int attempt = 0; attempt < 4 && rc == kErrorInsufficientSize; ++attempt) {
    count = static_cast<unsigned int>(samples.size());
    rc = get_process_utilization_(dev, samples.data(), &count, g.seen_us);
    if (rc == kErrorInsufficientSize)
      samples.resize(std::max<std::size_t>(count + 16, samples.size() * 2));
  }
  if (rc != kSuccess && rc != kErrorNotFound) return rc;
  const unsigned long long now = wall_us();
  if (g.last_read_us != 0 && now > g.last_read_us)
    g.longest_read_gap_us = std::max(g.longest_read_gap_us, now - g.last_read_us);
  g.last_read_us = now;
  if (rc != kSuccess) return rc;
  samples.resize(std::min<std::size_t>(count, samples.size()));
  for (const auto& s : samples) {
    // A sample from before the stretch (a driver that ignores lastSeen)
    // would keep the stretch from ever ending idle.
    if (s.timeStamp <= g.seen_us) continue;
    const bool held = std::ranges::any_of(
        g.pending, [&](const auto& o) { return o.pid == s.pid && o.timeStamp == s.timeStamp; });
    if (!held && g.pending.size() < kMaxPending) g.pending.push_back(s);
  }
  return rc;
}

void NvmlReader::collect_all() {
  std::lock_guard lock(mu_);
  if (!init_ok_ || !get_process_utilization_) return;
  for (auto& [uuid, g] : sampling_) {
    Device dev = nullptr;
    if (get_handle_by_uuid_(uuid.c_str(), &dev) == kSuccess) read_process_samples(dev, g);
  }
}

std::optional<NvmlReader::ProcessBusy> NvmlReader::process_busy(const std::string& uuid) {
  std::lock_guard lock(mu_);
  if (!init_ok_ || !get_process_utilization_) return std::nullopt;
  Device dev = nullptr;
  if (get_handle_by_uuid_(uuid.c_str(), &dev) != kSuccess) return std::nullopt;
  const ClockPair clocks{.monotonic_ns = shm::monotonic_ns(), .wall_us = wall_us()};
  auto found = sampling_.find(uuid);
  if (found == sampling_.end()) {
    GpuSampling& g = sampling_[uuid];
    g.seen_us = g.last_read_us = clocks.wall_us;
    return ProcessBusy{.from_ns = clocks.monotonic_ns, .to_ns = clocks.monotonic_ns};
  }
  GpuSampling& g = found->second;
  learn_sampling_period(dev, g.history);
  const int rc = read_process_samples(dev, g);
  std::vector<nvml::ProcessUtilizationSample> samples = std::move(g.pending);
  g.pending.clear();
  const bool tiles = g.history.reading_tiles(std::exchange(g.longest_read_gap_us, 0));
  if (rc != kSuccess && rc != kErrorNotFound && samples.empty()) return std::nullopt;
  if (samples.empty()) {  // nothing ran in the periods that are over
    const unsigned long long end =
        idle_stretch_end_us(g.seen_us, clocks.wall_us, g.history.longest_period_us());
    ProcessBusy idle{.from_ns = clocks.to_monotonic_ns(g.seen_us),
                     .to_ns = clocks.to_monotonic_ns(end),
                     .samples_tile = tiles};
    g.seen_us = end;
    return idle;
  }
  SampledBusy sampled = busy_from_samples(samples, g.seen_us, g.history);
  g.seen_us = sampled.to_us;
  return ProcessBusy{.busy_ns = std::move(sampled.busy_ns),
                     .from_ns = clocks.to_monotonic_ns(sampled.from_us),
                     .to_ns = clocks.to_monotonic_ns(sampled.to_us),
                     .samples_tile = tiles};
}

// The device's utilisation samples come every sampling period, idle or
// not: their stamps show the period that the processes' samples stand for.
void NvmlReader::learn_sampling_period(Device dev, SampleHistory& history) {
  if (!get_samples_) return;
  int type = 0;
  unsigned int count = 0;
  if (get_samples_(dev, nvml::kGpuUtilizationSamples, history.last_device_stamp_us, &type, &count,
                   nullptr) != kSuccess ||
      count == 0)
    return;
  std::vector<nvml::Sample> samples(std::min(count, 4096u));
  count = static_cast<unsigned int>(samples.size());
  if (get_samples_(dev, nvml::kGpuUtilizationSamples, history.last_device_stamp_us, &type, &count,
                   samples.data()) != kSuccess)
    return;
  std::vector<unsigned long long> stamps;
  for (unsigned int i = 0; i < count && i < samples.size(); ++i)
    stamps.push_back(samples[i].timeStamp);
  learn_device_period(stamps, history);
}

}  // namespace cushare::sched
