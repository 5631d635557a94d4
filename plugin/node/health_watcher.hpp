// Watches NVML for XID critical errors and marks the GPU that raised one
// Unhealthy (all of its IDs, in one snapshot). Application-caused XIDs
// (config ignoredXids; by default 13, 31, 43, 45, 68, 109 as in NVIDIA's
// plugin) are logged and ignored. A GPU whose events cannot be registered is
// marked Unhealthy, except where the driver says events are not supported.
#pragma once

#include <atomic>
#include <map>
#include <thread>

#include "plugin/core/gpu_inventory.hpp"
#include "plugin/core/plugin_config.hpp"
#include "plugin/node/device_health.hpp"
#include "plugin/node/nvml_library.hpp"

namespace cushare::plugin {

class HealthWatcher {
 public:
  HealthWatcher(const NvmlLibrary& nvml, const Inventory& inventory, const PluginConfig& config,
                DeviceHealth& health);
  ~HealthWatcher();
  HealthWatcher(const HealthWatcher&) = delete;
  HealthWatcher& operator=(const HealthWatcher&) = delete;

  // Registers the event set and starts the watching thread; false when
  // health checks are unavailable (logged).
  bool start();
  void stop();

 private:
  void run();
  void handle_xid(nvml::Device device, unsigned long long xid);

  const NvmlLibrary& nvml_;
  const Inventory& inventory_;
  const PluginConfig& config_;
  DeviceHealth& health_;
  nvml::EventSet set_ = nullptr;
  std::map<nvml::Device, std::string> uuid_of_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cushare::plugin
