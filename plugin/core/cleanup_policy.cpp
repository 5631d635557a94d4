#include "plugin/core/cleanup_policy.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "plugin/core/allocation_plan.hpp"

namespace cushare::plugin {

std::vector<std::string> folders_to_remove(const std::vector<AllocationFolderFacts>& folders,
                                           const LiveAllocations& live,
                                           std::chrono::system_clock::time_point now,
                                           const PluginConfig& config) {
  std::vector<std::string> remove;
  for (const auto& f : folders) {
    if (f.has_live_process) continue;
    const auto newest = std::max(f.created, f.last_activity);
    if (now - newest < config.cleanup_min_age) continue;
    switch (live.source) {
      case LivenessSource::kPodResources:
      case LivenessSource::kCheckpoint:
        if (!live.alloc_ids.contains(f.alloc_id)) remove.push_back(f.alloc_id);
        break;
      case LivenessSource::kNone:
        if (now - newest >= config.orphan_age) remove.push_back(f.alloc_id);
        break;
    }
  }
  return remove;
}

std::optional<std::set<std::string>> live_allocations_from_checkpoint(
    std::string_view checkpoint_json, const std::vector<std::string>& resource_names) {
  using nlohmann::json;
  const json doc = json::parse(checkpoint_json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("Data") || !doc["Data"].is_object()) return std::nullopt;
  const json& data = doc["Data"];
  if (!data.contains("PodDeviceEntries")) return std::set<std::string>{};
  const json& entries = data["PodDeviceEntries"];
  if (entries.is_null()) return std::set<std::string>{};
  if (!entries.is_array()) return std::nullopt;
  std::set<std::string> live;
  for (const auto& e : entries) {
    if (!e.is_object() || !e.contains("ResourceName") || !e.contains("DeviceIDs")) {
      return std::nullopt;
    }
    if (!e["ResourceName"].is_string()) return std::nullopt;
    if (std::find(resource_names.begin(), resource_names.end(),
                  e["ResourceName"].get<std::string>()) == resource_names.end())
      continue;
    std::vector<std::string> ids;
    const json& d = e["DeviceIDs"];
    auto add_list = [&](const json& list) {
      if (!list.is_array()) return false;
      for (const auto& id : list) {
        if (!id.is_string()) return false;
        ids.push_back(id.get<std::string>());
      }
      return true;
    };
    if (d.is_array()) {  // older kubelets: a flat list
      if (!add_list(d)) return std::nullopt;
    } else if (d.is_object()) {  // {"<numa node>": [ids]}
      for (const auto& [numa, list] : d.items()) {
        if (!add_list(list)) return std::nullopt;
      }
    } else if (!d.is_null()) {
      return std::nullopt;
    }
    if (!ids.empty()) live.insert(allocation_id_for(ids));
  }
  return live;
}

}  // namespace cushare::plugin
