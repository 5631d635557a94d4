// A container the kubelet tracks, with the device IDs of one of the plugin's
// resources: what a PodResources List returns (plugin/node/pod_resources_client)
// and what the pure planners (pod_identity_sync) take.
#pragma once

#include <string>
#include <vector>

namespace cushare::plugin {

struct ContainerDevices {
  std::string pod;
  std::string pod_namespace;
  std::string container;
  std::vector<std::string> device_ids;  // of one of the plugin's resources
};

}  // namespace cushare::plugin
