// Periodically removes allocation folders of pods that are gone: gathers the
// facts (live allocations from the kubelet's PodResources API or its
// checkpoint, folder ages, live process slots) and applies cleanup_policy.
#pragma once

#include <vector>

#include "plugin/core/cleanup_policy.hpp"
#include "plugin/core/plugin_config.hpp"
#include "plugin/node/allocation_store.hpp"
#include "plugin/node/periodic_task.hpp"

namespace cushare::plugin {

// Liveness from the best source available now (see cleanup_policy.hpp).
LiveAllocations gather_live_allocations(const PluginConfig& config);

// Facts about every folder under <run_dir>/alloc.
std::vector<AllocationFolderFacts> gather_folder_facts(const std::string& run_dir);

class AllocationCleaner {
 public:
  AllocationCleaner(const PluginConfig& config, AllocationStore& store);

  void start() { task_.start(); }
  void stop() { task_.stop(); }
  // One pass; returns the allocation ids removed.
  std::vector<std::string> run_once();

 private:
  const PluginConfig& config_;
  AllocationStore& store_;
  PeriodicTask task_;
};

}  // namespace cushare::plugin
