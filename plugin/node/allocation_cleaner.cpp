#include "plugin/node/allocation_cleaner.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "plugin/core/allocation_plan.hpp"
#include "plugin/node/pod_resources_client.hpp"
#include "shm/region_file.hpp"
#include "shm/run_dir_layout.hpp"

namespace cushare::plugin {
namespace fs = std::filesystem;
using Clock = std::chrono::system_clock;

namespace {

constexpr char kCheckpointName[] = "kubelet_internal_checkpoint";

std::optional<std::set<std::string>> from_pod_resources(const PluginConfig& config) {
  const auto containers = list_pod_resources(config);
  if (!containers) return std::nullopt;
  std::set<std::string> live;
  for (const auto& c : *containers) live.insert(allocation_id_for(c.device_ids));
  return live;
}

std::optional<std::set<std::string>> from_checkpoint(const PluginConfig& config) {
  std::ifstream in(fs::path(config.device_plugin_dir) / kCheckpointName);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return live_allocations_from_checkpoint(text.str(), resource_names(config));
}

Clock::time_point modified_at(const fs::path& p) {
  struct stat st {};
  if (stat(p.c_str(), &st) != 0) return {};
  return Clock::time_point{} + std::chrono::seconds(st.st_mtim.tv_sec) +
         std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(st.st_mtim.tv_nsec));
}

}  // namespace

LiveAllocations gather_live_allocations(const PluginConfig& config) {
  if (auto live = from_pod_resources(config))
    return {LivenessSource::kPodResources, std::move(*live)};
  if (auto live = from_checkpoint(config)) return {LivenessSource::kCheckpoint, std::move(*live)};
  return {LivenessSource::kNone, {}};
}

std::vector<AllocationFolderFacts> gather_folder_facts(const std::string& run_dir) {
  std::vector<AllocationFolderFacts> facts;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / shm::kAllocDirName, ec)) {
    if (!entry.is_directory()) continue;
    AllocationFolderFacts f;
    f.alloc_id = entry.path().filename().string();
    f.created = modified_at(entry.path());
    f.last_activity = std::max({f.created, modified_at(entry.path() / shm::kLimitsName),
                                modified_at(entry.path() / shm::kUsageName)});
    try {
      auto limits =
          shm::LimitsMapping::open(entry.path() / shm::kLimitsName, shm::Access::kReadOnly);
      f.created = Clock::time_point{} +
                  std::chrono::duration_cast<Clock::duration>(
                      std::chrono::nanoseconds(limits.region().header.created_unix_ns));
    } catch (const shm::RegionError&) {
    }
    try {
      auto usage = shm::UsageMapping::open(entry.path() / shm::kUsageName, shm::Access::kReadOnly);
      for (const auto& slot : usage.region().slots) {
        const auto state = static_cast<shm::SlotState>(slot.state.load(std::memory_order_acquire));
        if (state != shm::SlotState::kFree) {
          f.has_live_process = true;
          break;
        }
      }
    } catch (const shm::RegionError& e) {
      // Unreadable for a reason other than "missing or not a region": keep it.
      f.has_live_process = e.code() == shm::RegionErrorCode::kIo;
    }
    facts.push_back(std::move(f));
  }
  return facts;
}

AllocationCleaner::AllocationCleaner(const PluginConfig& config, AllocationStore& store)
    : config_(config),
      store_(store),
      task_("allocation cleanup", config.cleanup_interval, [this] { run_once(); }) {}

std::vector<std::string> AllocationCleaner::run_once() {
  const auto live = gather_live_allocations(config_);
  const auto folders = gather_folder_facts(config_.run_dir);
  std::vector<std::string> removed;
  for (const auto& id : folders_to_remove(folders, live, Clock::now(), config_)) {
    if (store_.remove_unless_recent(id, config_.cleanup_min_age)) {
      spdlog::info("removed allocation folder {} (its pod is gone)", id);
      removed.push_back(id);
    }
  }
  return removed;
}

}  // namespace cushare::plugin
