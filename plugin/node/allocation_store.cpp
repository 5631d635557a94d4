#include "plugin/node/allocation_store.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "shm/limits_seqlock.hpp"
#include "shm/region_file.hpp"
#include "shm/run_dir_layout.hpp"

namespace cushare::plugin {
namespace fs = std::filesystem;
namespace {

shm::GpuLimitsSnapshot snapshot_of(const GpuQuota& q) {
  shm::GpuLimitsSnapshot s;
  s.memory_limit_bytes = q.memory_limit_bytes;
  s.compute_limit_pct = q.compute_limit_pct;
  s.weight = q.weight;
  s.mode = q.mode;
  return s;
}

// True when the existing region describes the same GPUs in the same order.
bool same_gpus(const shm::LimitsRegion& region, const AllocationPlan& plan) {
  if (region.gpu_count.load() != plan.gpus.size()) return false;
  for (std::size_t i = 0; i < plan.gpus.size(); ++i) {
    if (plan.gpus[i].uuid != std::string(region.gpus[i].uuid)) return false;
  }
  return true;
}

}  // namespace

void AllocationStore::write(const AllocationPlan& plan) {
  std::lock_guard lock(mu_);
  fs::create_directories(plan.host_alloc_dir);
  // Containers reach the folder through its bind mount only: alloc/ is the
  // node's alone, and the folder only needs to be searchable by the
  // container's processes (any uid) to open their files by name.
  fs::permissions(fs::path(plan.host_alloc_dir).parent_path(), fs::perms(shm::kAllocRootMode));
  fs::permissions(plan.host_alloc_dir, fs::perms(shm::kAllocFolderMode));
  write_limits(plan);
  write_usage(plan);
  if (!plan.preload_host_path.empty()) write_preload(plan);
  last_write_[plan.alloc_id] = std::chrono::steady_clock::now();
}

void AllocationStore::write_limits(const AllocationPlan& plan) {
  const fs::path path = fs::path(plan.host_alloc_dir) / shm::kLimitsName;
  // A folder the tenant could write since (a retried Allocate): whatever is
  // at the path is never followed (RegionMapping opens with O_NOFOLLOW).
  if (fs::exists(fs::symlink_status(path))) {
    try {
      auto mapping = shm::LimitsMapping::open(path, shm::Access::kReadWrite);
      if (same_gpus(mapping.region(), plan)) {
        for (std::size_t i = 0; i < plan.gpus.size(); ++i) {
          shm::update_gpu_limits(mapping.mutable_region(), static_cast<unsigned>(i),
                                 snapshot_of(plan.gpus[i]));
        }
        return;
      }
      // Same hash, other GPUs: cannot happen unless the file was tampered with.
      spdlog::warn("{}: describes other GPUs than allocation {}; recreating it", path.string(),
                   plan.alloc_id);
    } catch (const shm::RegionError& e) {
      spdlog::warn("{}; recreating it", e.what());
    }
    fs::remove_all(path);
  }
  shm::RegionCreateOptions opts;
  opts.alloc_id = plan.alloc_id;
  opts.flags = shm::kCreatedByPlugin;
  shm::LimitsMapping::create(path, opts, [&](shm::LimitsRegion& region) {
    for (std::size_t i = 0; i < plan.gpus.size(); ++i) {
      shm::init_gpu_entry(region, static_cast<unsigned>(i), plan.gpus[i].uuid,
                          snapshot_of(plan.gpus[i]));
    }
  });
}

void AllocationStore::write_usage(const AllocationPlan& plan) {
  const fs::path path = fs::path(plan.host_alloc_dir) / shm::kUsageName;
  shm::RegionCreateOptions opts;
  opts.alloc_id = plan.alloc_id;
  opts.flags = shm::kCreatedByPlugin;
  try {
    shm::UsageMapping::open_or_create(path, opts, [&](shm::UsageRegion& region) {
      region.gpu_count.store(static_cast<std::uint32_t>(plan.gpus.size()));
    });
  } catch (const shm::RegionError& e) {
    if (e.code() == shm::RegionErrorCode::kIo) throw;
    // An invalid usage file is never trusted, nor followed (a symbolic link
    // the tenant put there): start an empty one.
    spdlog::warn("{}; recreating it", e.what());
    fs::remove_all(path);
    shm::UsageMapping::create(path, opts, [&](shm::UsageRegion& region) {
      region.gpu_count.store(static_cast<std::uint32_t>(plan.gpus.size()));
    });
  }
}

void AllocationStore::write_preload(const AllocationPlan& plan) {
  {
    std::ifstream in(plan.preload_host_path);
    std::stringstream current;
    current << in.rdbuf();
    if (in && current.str() == plan.preload_content) return;
  }
  // Write-and-rename so a container starting now never sees a partial file.
  const std::string tmp = fmt::format("{}.tmp.{}", plan.preload_host_path, getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << plan.preload_content;
    if (!out.flush()) throw std::runtime_error(fmt::format("cannot write {}", tmp));
  }
  fs::permissions(tmp, fs::perms(0644));
  fs::rename(tmp, plan.preload_host_path);
}

bool AllocationStore::remove_unless_recent(const std::string& alloc_id,
                                           std::chrono::seconds grace) {
  std::lock_guard lock(mu_);
  if (auto it = last_write_.find(alloc_id); it != last_write_.end()) {
    if (std::chrono::steady_clock::now() - it->second < grace) return false;
    last_write_.erase(it);
  }
  std::error_code ec;
  fs::remove_all(fs::path(run_dir_) / shm::kAllocDirName / alloc_id, ec);
  if (ec) {
    spdlog::warn("cannot remove allocation {}: {}", alloc_id, ec.message());
    return false;
  }
  return true;
}

}  // namespace cushare::plugin
