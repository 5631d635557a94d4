// The plugin's life cycle: serve on <dir>/<socket>, then Register with the
// kubelet; serve and register again when the kubelet restarts (kubelet.sock
// recreated), when our socket disappears, or when the ListAndWatch stream
// ends; retry registration until the kubelet answers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include <grpcpp/grpcpp.h>

#include "plugin/core/gpu_inventory.hpp"
#include "plugin/core/plugin_config.hpp"
#include "plugin/node/allocation_store.hpp"
#include "plugin/node/device_health.hpp"
#include "plugin/node/plugin_service.hpp"

namespace cushare::plugin {

class PluginRunner {
 public:
  PluginRunner(const Inventory& inventory, const PluginConfig& config, DeviceHealth& health,
               AllocationStore& store);
  ~PluginRunner();

  // Blocks until request_shutdown(); throws when the socket cannot be served.
  void run();
  void request_shutdown();  // async-signal-unsafe: call from a normal thread

  std::string socket_path() const;

 private:
  enum class Trigger { kKubeletRestarted, kOwnSocketRemoved, kStreamEnded, kShutdown };
  void post(Trigger t);
  void serve();
  void stop_serving();
  bool register_with_kubelet();

  const Inventory& inventory_;
  const PluginConfig& config_;
  DeviceHealth& health_;
  AllocationStore& store_;
  std::string socket_name_;

  std::unique_ptr<PluginService> service_;
  std::unique_ptr<grpc::Server> server_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Trigger> triggers_;
};

}  // namespace cushare::plugin
