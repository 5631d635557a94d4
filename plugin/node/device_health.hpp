// Health of the node's GPUs as the plugin advertises it, with a version that
// ListAndWatch streams wait on: every change produces one new full snapshot.
// A GPU marked unhealthy stays so until the plugin restarts (as in NVIDIA's
// plugin: an XID critical error needs an operator).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

namespace cushare::plugin {

class DeviceHealth {
 public:
  // Returns true when this changed the GPU's state.
  bool mark_unhealthy(const std::string& gpu_uuid);
  std::set<std::string> unhealthy_gpus() const;
  std::uint64_t version() const;

  // Waits until version() != seen, close() or timeout; returns the version.
  std::uint64_t wait_for_change(std::uint64_t seen, std::chrono::milliseconds timeout) const;
  // Wakes every waiter for good (plugin shutting down or restarting).
  void close();

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::set<std::string> unhealthy_;
  std::uint64_t version_ = 0;
  bool closed_ = false;
};

}  // namespace cushare::plugin
