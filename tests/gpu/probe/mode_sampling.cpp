// nvml-sampling: what the daemon's ground truth rests on. Every interval it
// reads each process's GPU time through the daemon's own NvmlReader (the
// stretch it stands for, in CLOCK_MONOTONIC), gathering samples between
// readings as the daemon does, and records the raw samples beside it: the processes' utilisation
// samples and the device's, as the driver returned them. The orchestrator compares the readings
// with the GPU time its workers know they ran, and keeps the raw samples for the record (how a
// driver samples is not documented). No CUDA call is made.
#include <dlfcn.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/nvml_reader.hpp"
#include "shm/clock.hpp"
#include "shm/nvml_api.hpp"
#include "tests/gpu/probe/messages.hpp"
#include "tests/gpu/probe/modes.hpp"

namespace cushare::gpuprobe {
namespace {

// The raw calls, beside the reader's (NVML counts its initialisations).
class RawSamples {
 public:
  explicit RawSamples(const std::string& uuid) {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) throw std::runtime_error("cannot load libnvidia-ml.so.1");
    const auto init = nvml::symbol<nvml::InitFn>(lib_, "nvmlInit_v2");
    const auto by_uuid =
        nvml::symbol<nvml::DeviceGetHandleByUuidFn>(lib_, "nvmlDeviceGetHandleByUUID");
    process_ =
        nvml::symbol<nvml::DeviceGetProcessUtilizationFn>(lib_, "nvmlDeviceGetProcessUtilization");
    device_ = nvml::symbol<nvml::DeviceGetSamplesFn>(lib_, "nvmlDeviceGetSamples");
    shutdown_ = nvml::symbol<nvml::ShutdownFn>(lib_, "nvmlShutdown");
    if (!init || !by_uuid || init() != nvml::kSuccess || by_uuid(uuid.c_str(), &dev_) != 0)
      throw std::runtime_error("NVML cannot open the device " + uuid);
    last_process_us_ = last_device_us_ = shm::realtime_ns() / 1000;
  }
  ~RawSamples() {
    if (shutdown_) shutdown_();
    dlclose(lib_);
  }
  RawSamples(const RawSamples&) = delete;
  RawSamples& operator=(const RawSamples&) = delete;

  // Asks for the processes' samples newer than the latest seen, and keeps
  // them for process_samples().
  void poll_processes() {
    if (!process_) return;
    std::vector<nvml::ProcessUtilizationSample> s(256);
    auto count = static_cast<unsigned int>(s.size());
    const int rc = process_(dev_, s.data(), &count, last_process_us_);
    ++calls_;
    unsigned long long latest = last_process_us_;
    for (unsigned int i = 0; rc == nvml::kSuccess && i < count && i < s.size(); ++i) {
      pending_.push_back({s[i].pid, s[i].timeStamp, s[i].smUtil});
      latest = std::max(latest, s[i].timeStamp);
    }
    last_process_us_ = latest;
    last_status_ = rc;
  }
  // [[pid, stamp_us, smUtil], ...] of every poll since the last call (and
  // one now), the number of calls and the last NVML status.
  nlohmann::json process_samples() {
    if (!process_) return {{"status", "absent"}, {"samples", nlohmann::json::array()}};
    poll_processes();
    nlohmann::json out{{"status", last_status_}, {"calls", calls_}, {"samples", pending_}};
    pending_ = nlohmann::json::array();
    calls_ = 0;
    return out;
  }
  // [[stamp_us, value], ...] of the device's GPU utilisation samples.
  nlohmann::json device_samples() {
    nlohmann::json out = nlohmann::json::array();
    if (!device_) return {{"status", "absent"}, {"samples", out}};
    std::vector<nvml::Sample> s(1024);
    auto count = static_cast<unsigned int>(s.size());
    int type = 0;
    const int rc =
        device_(dev_, nvml::kGpuUtilizationSamples, last_device_us_, &type, &count, s.data());
    for (unsigned int i = 0; rc == nvml::kSuccess && i < count && i < s.size(); ++i) {
      // nvmlValue_t's unsigned int member: the low 4 bytes.
      out.push_back({s[i].timeStamp, s[i].sampleValue & 0xffffffffull});
      last_device_us_ = std::max(last_device_us_, s[i].timeStamp);
    }
    return {{"status", rc}, {"type", type}, {"samples", out}};
  }

 private:
  void* lib_ = nullptr;
  nvml::Device dev_ = nullptr;
  nvml::DeviceGetProcessUtilizationFn process_ = nullptr;
  nvml::DeviceGetSamplesFn device_ = nullptr;
  nvml::ShutdownFn shutdown_ = nullptr;
  unsigned long long last_process_us_ = 0, last_device_us_ = 0;
  nlohmann::json pending_ = nlohmann::json::array();
  int calls_ = 0, last_status_ = 0;
};

}  // namespace

int runSampling(const SamplingOptions& o) {
  sched::NvmlReader reader;
  if (!reader.available()) throw std::runtime_error("NVML is not available");
  std::string uuid = o.uuid;
  if (uuid.empty()) {
    const auto uuids = reader.gpu_uuids();
    if (uuids.empty()) throw std::runtime_error("NVML lists no GPU");
    uuid = uuids.front();
  }
  RawSamples raw(uuid);
  // Both clocks at once, to place the samples' wall-clock stamps.
  emit({{"event", "ready"},
        {"uuid", uuid},
        {"monotonic_ns", shm::monotonic_ns()},
        {"wall_us", shm::realtime_ns() / 1000}});
  const auto interval = std::chrono::milliseconds(o.interval_ms);
  const auto collect = std::chrono::milliseconds(o.collect_ms);
  auto next = std::chrono::steady_clock::now();
  const auto end = next + std::chrono::duration<double>(o.seconds);
  for (;;) {
    const std::uint64_t read_ns = shm::monotonic_ns();
    nlohmann::json msg{{"event", "reading"}, {"read_ns", read_ns}};
    if (auto b = reader.process_busy(uuid)) {
      nlohmann::json busy = nlohmann::json::object();
      for (const auto& [pid, ns] : b->busy_ns) busy[std::to_string(pid)] = ns;
      msg["from_ns"] = b->from_ns;
      msg["to_ns"] = b->to_ns;
      msg["busy_ns"] = busy;
    } else {
      msg["error"] = "NVML could not answer";
    }
    msg["process"] = raw.process_samples();
    msg["device"] = raw.device_samples();
    emit(msg);
    if (std::chrono::steady_clock::now() >= end) break;
    next += interval;
    // Between readings, as the daemon does: every period's sample.
    for (auto at = std::chrono::steady_clock::now() + collect; at < next; at += collect) {
      std::this_thread::sleep_until(at);
      reader.collect_all();
      raw.poll_processes();
    }
    std::this_thread::sleep_until(next);
  }
  emit({{"event", "done"}});
  return 0;
}

}  // namespace cushare::gpuprobe
