#include "plugin/node/health_watcher.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace cushare::plugin {
namespace {
constexpr unsigned kWaitSliceMs = 200;
}

HealthWatcher::HealthWatcher(const NvmlLibrary& nvml, const Inventory& inventory,
                             const PluginConfig& config, DeviceHealth& health)
    : nvml_(nvml), inventory_(inventory), config_(config), health_(health) {}

HealthWatcher::~HealthWatcher() {
  stop();
}

bool HealthWatcher::start() {
  if (nvml_.event_set_create == nullptr || nvml_.device_register_events == nullptr ||
      nvml_.event_set_wait == nullptr) {
    spdlog::warn("health checks disabled: the NVML library has no event API");
    return false;
  }
  if (const auto r = nvml_.event_set_create(&set_); r != nvml::kSuccess) {
    spdlog::warn("health checks disabled: nvmlEventSetCreate failed: {}", nvml_.error_string(r));
    return false;
  }
  for (const auto& gpu : inventory_.gpus) {
    nvml::Device dev = nullptr;
    auto r = nvml_.device_get_handle_by_index(static_cast<unsigned>(gpu.index), &dev);
    if (r == nvml::kSuccess) {
      r = nvml_.device_register_events(dev, nvml::kEventTypeXidCriticalError, set_);
    }
    if (r == nvml::kErrorNotSupported) {
      spdlog::warn("GPU {} ({}): XID events not supported; no health checks for it", gpu.index,
                   gpu.uuid);
      continue;
    }
    if (r != nvml::kSuccess) {
      spdlog::error("GPU {} ({}): cannot register XID events ({}); marking it Unhealthy", gpu.index,
                    gpu.uuid, nvml_.error_string(r));
      health_.mark_unhealthy(gpu.uuid);
      continue;
    }
    uuid_of_[dev] = gpu.uuid;
  }
  thread_ = std::thread([this] { run(); });
  return true;
}

void HealthWatcher::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (set_ != nullptr && nvml_.event_set_free != nullptr) nvml_.event_set_free(set_);
  set_ = nullptr;
}

void HealthWatcher::run() {
  while (!stop_) {
    nvml::EventData data{};
    const auto r = nvml_.event_set_wait(set_, &data, kWaitSliceMs);
    if (r == nvml::kErrorTimeout) continue;
    if (r != nvml::kSuccess) {
      spdlog::warn("nvmlEventSetWait_v2 failed: {}", nvml_.error_string(r));
      std::this_thread::sleep_for(std::chrono::milliseconds(kWaitSliceMs));
      continue;
    }
    if ((data.eventType & nvml::kEventTypeXidCriticalError) != 0)
      handle_xid(data.device, data.eventData);
  }
}

void HealthWatcher::handle_xid(nvml::Device device, unsigned long long xid) {
  const auto& ignored = config_.ignored_xids;
  const auto it = uuid_of_.find(device);
  const std::string who = it != uuid_of_.end() ? it->second : "an unknown GPU";
  if (std::find(ignored.begin(), ignored.end(), xid) != ignored.end()) {
    spdlog::info("XID {} on {}: application error, ignored", xid, who);
    return;
  }
  if (it == uuid_of_.end()) {
    // NVML could not say which GPU: like NVIDIA's plugin, distrust them all.
    spdlog::error("XID {} on an unknown GPU: marking every GPU Unhealthy", xid);
    for (const auto& gpu : inventory_.gpus) health_.mark_unhealthy(gpu.uuid);
    return;
  }
  if (health_.mark_unhealthy(it->second)) {
    spdlog::error("XID {} on GPU {}: marking all of its IDs Unhealthy", xid, it->second);
  }
}

}  // namespace cushare::plugin
