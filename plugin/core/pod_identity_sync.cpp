#include "plugin/core/pod_identity_sync.hpp"

#include "plugin/core/allocation_plan.hpp"

namespace cushare::plugin {

std::map<std::string, shm::PodIdentity> identities_by_allocation(
    const std::vector<ContainerDevices>& containers) {
  std::map<std::string, shm::PodIdentity> out;
  for (const auto& c : containers) {
    out[allocation_id_for(c.device_ids)] = {c.pod, c.pod_namespace, c.container};
  }
  return out;
}

IdentitySync plan_identity_sync(const std::map<std::string, std::string>& on_disk,
                                const std::map<std::string, shm::PodIdentity>& wanted) {
  IdentitySync sync;
  for (const auto& [name, content] : on_disk) {
    if (!wanted.contains(name)) sync.removals.push_back(name);
  }
  for (const auto& [id, identity] : wanted) {
    auto content = shm::format_pod_identity(identity);
    const auto it = on_disk.find(id);
    if (it == on_disk.end() || it->second != content) sync.writes[id] = std::move(content);
  }
  return sync;
}

}  // namespace cushare::plugin
