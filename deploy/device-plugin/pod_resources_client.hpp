// One PodResources List call to the kubelet: every container it tracks with
// the device IDs of each resource. The cleaner takes liveness from it and the
// identity publisher the pod each allocation belongs to.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "deploy/device-plugin/plugin_config.hpp"

namespace cushare::plugin {

struct ContainerDevices {
  std::string pod;
  std::string pod_namespace;
  std::string container;
  std::vector<std::string> device_ids;  // of one of the plugin's resources
};

// nullopt when the socket is absent or the call fails (logged); containers
// without IDs of the plugin's resource are left out.
std::optional<std::vector<ContainerDevices>> ListPodResources(const PluginConfig& config);

}  // namespace cushare::plugin
