// What the identity folder (shm/pod_identity.hpp) should hold after a
// PodResources List, as pure code: one file per allocation of a container the
// kubelet tracks, naming its pod, namespace and container.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "plugin/core/container_devices.hpp"
#include "shm/pod_identity.hpp"

namespace cushare::plugin {

// Allocation id -> identity. A container's allocation id is the hash of its
// device IDs, as in Allocate.
std::map<std::string, shm::PodIdentity> identities_by_allocation(
    const std::vector<ContainerDevices>& containers);

struct IdentitySync {
  std::map<std::string, std::string> writes;  // file name -> content
  std::vector<std::string> removals;          // file names
};

// `on_disk`: file name -> content of what the folder holds now. Files of
// allocations the kubelet no longer lists go; new or changed ones are written.
IdentitySync plan_identity_sync(const std::map<std::string, std::string>& on_disk,
                                const std::map<std::string, shm::PodIdentity>& wanted);

}  // namespace cushare::plugin
