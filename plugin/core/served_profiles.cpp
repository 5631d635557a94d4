#include "plugin/core/served_profiles.hpp"

#include <set>

#include <fmt/format.h>

namespace cushare::plugin {
namespace {

const GpuInfo* select_gpu(const Inventory& inventory, const std::string& selector) {
  for (const auto& g : inventory.gpus) {
    if (g.uuid == selector || std::to_string(g.index) == selector) return &g;
  }
  return nullptr;
}

std::string nth_socket_name(const std::string& name, std::size_t n) {
  if (name.empty() || n == 0) return name;  // empty: a unique name per runner anyway
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return fmt::format("{}-{}", name, n);
  return fmt::format("{}-{}{}", name.substr(0, dot), n, name.substr(dot));
}

}  // namespace

ProfilePlan plan_profiles(const PluginConfig& config, const Inventory& inventory) {
  ProfilePlan plan;
  if (config.profiles.empty()) {
    plan.profiles.push_back({.config = config, .inventory = inventory});
    return plan;
  }
  std::set<std::string> taken;
  for (std::size_t i = 0; i < config.profiles.size(); ++i) {
    const ProfileConfig& p = config.profiles[i];
    ServedProfile served{.config = config_for_profile(config, p), .inventory = {}};
    served.config.socket_name = nth_socket_name(config.socket_name, i);
    served.inventory.control_nodes = inventory.control_nodes;
    std::set<std::string> mine;
    for (const auto& selector : p.gpus) {
      const GpuInfo* g = select_gpu(inventory, selector);
      if (!g) {
        throw ConfigError(fmt::format("profile {} names GPU '{}', which this node does not have",
                                      p.resource_name, selector));
      }
      if (!taken.insert(g->uuid).second && !mine.contains(g->uuid)) {
        throw ConfigError(
            fmt::format("GPU {} ({}) is in two profiles (a GPU serves one)", g->index, g->uuid));
      }
      mine.insert(g->uuid);
    }
    for (const auto& g : inventory.gpus) {
      if (mine.contains(g.uuid)) served.inventory.gpus.push_back(g);
    }
    plan.profiles.push_back(std::move(served));
  }
  for (const auto& g : inventory.gpus) {
    if (!taken.contains(g.uuid)) plan.unassigned_gpus.push_back(g.uuid);
  }
  return plan;
}

}  // namespace cushare::plugin
