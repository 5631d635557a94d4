#include "plugin/node/device_health.hpp"

namespace cushare::plugin {

bool DeviceHealth::mark_unhealthy(const std::string& gpu_uuid) {
  {
    std::lock_guard lock(mu_);
    if (!unhealthy_.insert(gpu_uuid).second) return false;
    ++version_;
  }
  cv_.notify_all();
  return true;
}

std::set<std::string> DeviceHealth::unhealthy_gpus() const {
  std::lock_guard lock(mu_);
  return unhealthy_;
}

std::uint64_t DeviceHealth::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

std::uint64_t DeviceHealth::wait_for_change(std::uint64_t seen,
                                            std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return version_ != seen || closed_; });
  return version_;
}

void DeviceHealth::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

}  // namespace cushare::plugin
