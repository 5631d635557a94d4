#include "plugin/node/pod_resources_client.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <grpcpp/grpcpp.h>
#include <pod_resources_v1.grpc.pb.h>
#include <spdlog/spdlog.h>

namespace cushare::plugin {

std::optional<std::vector<ContainerDevices>> list_pod_resources(const PluginConfig& config) {
  std::error_code ec;
  if (!std::filesystem::exists(config.pod_resources_socket, ec)) return std::nullopt;
  auto channel = grpc::CreateChannel("unix://" + config.pod_resources_socket,
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::PodResourcesLister::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ListPodResourcesResponse resp;
  const auto status = stub->List(&ctx, v1::ListPodResourcesRequest{}, &resp);
  if (!status.ok()) {
    spdlog::warn("PodResources List on {} failed: {}", config.pod_resources_socket,
                 status.error_message());
    return std::nullopt;
  }
  const std::vector<std::string> ours = resource_names(config);
  std::vector<ContainerDevices> out;
  for (const auto& pod : resp.pod_resources()) {
    for (const auto& container : pod.containers()) {
      for (const auto& devices : container.devices()) {
        if (std::find(ours.begin(), ours.end(), devices.resource_name()) == ours.end() ||
            devices.device_ids().empty())
          continue;
        out.push_back({pod.name(),
                       pod.namespace_(),
                       container.name(),
                       {devices.device_ids().begin(), devices.device_ids().end()}});
      }
    }
  }
  return out;
}

}  // namespace cushare::plugin
