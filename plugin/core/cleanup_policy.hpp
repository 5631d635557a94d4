// Which allocation folders may be removed: pure decisions over facts gathered
// by cleanup.cpp. Nothing of a running pod may ever be removed, so every rule
// below errs on the side of keeping a folder.
//
// Liveness sources, best first:
//  1. the kubelet's PodResources API (List): the device IDs of every container
//     of every pod the kubelet still tracks;
//  2. the kubelet's device-manager checkpoint
//     (<device-plugin-dir>/kubelet_internal_checkpoint), which holds the same
//     device IDs per pod and container;
//  3. neither: the age rule - a folder is removed only when no process slot in
//     its `usage` region is live and nothing touched it for orphanAgeSeconds.
// Whatever the source, a folder younger than cleanupMinAgeSeconds (Allocate
// runs before the pod shows up in either source) or with a live process slot
// is kept.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "plugin/core/plugin_config.hpp"

namespace cushare::plugin {

enum class LivenessSource { kPodResources, kCheckpoint, kNone };

struct LiveAllocations {
  LivenessSource source = LivenessSource::kNone;
  std::set<std::string> alloc_ids;  // allocation ids of containers that still exist
};

struct AllocationFolderFacts {
  std::string alloc_id;
  std::chrono::system_clock::time_point created;        // region creation time
  std::chrono::system_clock::time_point last_activity;  // newest write seen
  bool has_live_process = false;                        // a usage slot is claimed or active
};

std::vector<std::string> folders_to_remove(const std::vector<AllocationFolderFacts>& folders,
                                           const LiveAllocations& live,
                                           std::chrono::system_clock::time_point now,
                                           const PluginConfig& config);

// Allocation ids of the kubelet checkpoint's entries for the plugin's
// resources (`resource_names`: one per profile);
// std::nullopt when the text is not a checkpoint we understand (then the
// caller falls back to the age rule rather than trusting an empty set).
std::optional<std::set<std::string>> live_allocations_from_checkpoint(
    std::string_view checkpoint_json, const std::vector<std::string>& resource_names);

}  // namespace cushare::plugin
