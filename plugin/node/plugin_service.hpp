// The DevicePlugin gRPC service: advertises `units` IDs per GPU, streams full
// snapshots on every health change, answers GetPreferredAllocation from the
// pure packing code and Allocate from the pure plan plus AllocationStore.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>

#include <device_plugin_v1beta1.grpc.pb.h>

#include "plugin/core/gpu_inventory.hpp"
#include "plugin/core/plugin_config.hpp"
#include "plugin/node/allocation_store.hpp"
#include "plugin/node/device_health.hpp"

namespace cushare::plugin {

inline constexpr char kHealthy[] = "Healthy";
inline constexpr char kUnhealthy[] = "Unhealthy";

// The full device list for the current health state (pure).
v1beta1::ListAndWatchResponse build_snapshot(const Inventory& inventory,
                                             const std::set<std::string>& unhealthy_gpus,
                                             unsigned units_per_gpu);

class PluginService final : public v1beta1::DevicePlugin::Service {
 public:
  // `on_stream_end` runs when a ListAndWatch stream ends while the service is
  // not stopping and no other stream is open: the kubelet dropped us, so the
  // caller re-registers.
  PluginService(const Inventory& inventory, const PluginConfig& config, DeviceHealth& health,
                AllocationStore& store, std::function<void()> on_stream_end);

  // Ends open streams promptly (before the server shuts down).
  void stop();

  grpc::Status GetDevicePluginOptions(grpc::ServerContext* ctx, const v1beta1::Empty* req,
                                      v1beta1::DevicePluginOptions* resp) override;
  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty* req,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext* ctx,
                                      const v1beta1::PreferredAllocationRequest* req,
                                      v1beta1::PreferredAllocationResponse* resp) override;
  grpc::Status Allocate(grpc::ServerContext* ctx, const v1beta1::AllocateRequest* req,
                        v1beta1::AllocateResponse* resp) override;
  grpc::Status PreStartContainer(grpc::ServerContext* ctx,
                                 const v1beta1::PreStartContainerRequest* req,
                                 v1beta1::PreStartContainerResponse* resp) override;

 private:
  const Inventory& inventory_;
  const PluginConfig& config_;
  DeviceHealth& health_;
  AllocationStore& store_;
  std::function<void()> on_stream_end_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> open_streams_{0};
};

}  // namespace cushare::plugin
