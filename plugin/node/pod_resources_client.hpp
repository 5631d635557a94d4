// One PodResources List call to the kubelet: every container it tracks with
// the device IDs of each resource. The cleaner takes liveness from it and the
// identity publisher the pod each allocation belongs to.
#pragma once

#include <optional>
#include <vector>

#include "plugin/core/container_devices.hpp"
#include "plugin/core/plugin_config.hpp"

namespace cushare::plugin {

// nullopt when the socket is absent or the call fails (logged); containers
// without IDs of the plugin's resource are left out.
std::optional<std::vector<ContainerDevices>> list_pod_resources(const PluginConfig& config);

}  // namespace cushare::plugin
