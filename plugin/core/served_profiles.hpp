// Which resource each of the node's GPUs serves (docs/kubernetes.md, "Memory
// and compute chosen separately"). Pure: the inventory comes in, one
// (configuration, GPUs) pair per resource goes out, and each runs its own
// registration with the kubelet.
#pragma once

#include <string>
#include <vector>

#include "plugin/core/gpu_inventory.hpp"
#include "plugin/core/plugin_config.hpp"

namespace cushare::plugin {

struct ServedProfile {
  PluginConfig config;  // resource, units, ratios, mode, socket name of this resource
  Inventory inventory;  // its GPUs, in the node's order
};

struct ProfilePlan {
  std::vector<ServedProfile> profiles;
  std::vector<std::string> unassigned_gpus;  // UUIDs in no profile: not advertised
};

// Without profiles: one resource on every GPU. With profiles: each GPU a
// profile names (by NVML index or UUID) serves that profile only; a selector
// that names no GPU of the node, or a GPU named twice, throws ConfigError.
// Socket names stay unique: an explicit socketName gets "-<n>" before its
// extension for the n-th profile after the first.
ProfilePlan plan_profiles(const PluginConfig& config, const Inventory& inventory);

}  // namespace cushare::plugin
