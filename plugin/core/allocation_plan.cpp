#include "plugin/core/allocation_plan.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "plugin/core/device_id.hpp"
#include "plugin/core/gpu_spanning.hpp"
#include "shm/run_dir_layout.hpp"

namespace cushare::plugin {
namespace {

std::string join_path(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::uint64_t memory_quota(const GpuInfo& gpu, unsigned units, const PluginConfig& c) {
  // long double keeps 80 Gi * 100 exact; floor so a quota never exceeds its share.
  const long double bytes =
      static_cast<long double>(gpu.memory_bytes) * units * c.memory_ratio / c.units_per_gpu;
  const auto quota = static_cast<std::uint64_t>(std::floor(bytes));
  return std::min(quota, gpu.memory_bytes);
}

unsigned compute_percent(unsigned units, const PluginConfig& c) {
  // Floor, as for memory: rounded limits of one GPU's allocations could add
  // up past 100 % (3 x 2 + 1 of 7 units: 29 + 29 + 29 + 14). The epsilon
  // keeps 100 * 10 * 0.9 / 100 at 9, not 8.
  const double pct = std::floor(100.0 * units * c.compute_ratio / c.units_per_gpu + 1e-9);
  return static_cast<unsigned>(std::clamp(pct, 1.0, 100.0));
}

}  // namespace

std::string allocation_id_for(std::span<const std::string> device_ids) {
  std::vector<std::string> sorted(device_ids.begin(), device_ids.end());
  std::sort(sorted.begin(), sorted.end());
  std::uint64_t h = 14695981039346656037ULL;
  bool first = true;
  for (const auto& id : sorted) {
    if (!first) {
      h ^= static_cast<unsigned char>('\n');
      h *= 1099511628211ULL;
    }
    first = false;
    for (const unsigned char ch : id) {
      h ^= ch;
      h *= 1099511628211ULL;
    }
  }
  return fmt::format("a{:016x}", h);
}

std::string host_allocation_dir(const PluginConfig& config, const std::string& alloc_id) {
  return join_path(join_path(config.run_dir, shm::kAllocDirName), alloc_id);
}

std::string preload_host_path(const PluginConfig& config) {
  return join_path(config.run_dir, "ld.so.preload");
}

AllocationPlan plan_allocation(const Inventory& inventory, std::span<const std::string> device_ids,
                               const PluginConfig& config) {
  if (device_ids.empty()) throw AllocationError("Allocate request names no device IDs");

  // Units per GPU, keyed by inventory position so the plan follows host order.
  std::map<std::size_t, unsigned> units_by_gpu;
  std::set<std::string> seen;
  for (const auto& id : device_ids) {
    if (!seen.insert(id).second) {
      throw AllocationError(fmt::format("device ID '{}' appears twice in the request", id));
    }
    DeviceId parsed;
    try {
      parsed = parse_device_id(id);
    } catch (const DeviceIdError& e) {
      throw AllocationError(e.what());
    }
    const GpuInfo* gpu = inventory.find(parsed.gpu_uuid);
    if (gpu == nullptr) {
      throw AllocationError(
          fmt::format("unknown device ID '{}': no GPU '{}' on this node", id, parsed.gpu_uuid));
    }
    if (parsed.unit >= config.units_per_gpu ||
        format_device_id(parsed.gpu_uuid, parsed.unit) != id) {
      throw AllocationError(fmt::format("unknown device ID '{}': units of a GPU are 0..{}", id,
                                        config.units_per_gpu - 1));
    }
    ++units_by_gpu[static_cast<std::size_t>(gpu - inventory.gpus.data())];
  }
  std::map<std::string, unsigned> units_by_uuid;
  for (const auto& [pos, units] : units_by_gpu) units_by_uuid[inventory.gpus[pos].uuid] = units;
  check_gpu_spanning(units_by_uuid, config.units_per_gpu, config.gpu_spanning);
  if (units_by_gpu.size() > shm::kMaxGpus) {
    throw AllocationError(fmt::format("an allocation may span at most {} GPUs", shm::kMaxGpus));
  }

  AllocationPlan plan;
  plan.alloc_id = allocation_id_for(device_ids);
  plan.host_alloc_dir = host_allocation_dir(config, plan.alloc_id);
  for (const auto& [pos, units] : units_by_gpu) {
    const GpuInfo& gpu = inventory.gpus[pos];
    GpuQuota q;
    q.uuid = gpu.uuid;
    q.gpu_index = gpu.index;
    q.minor_number = gpu.minor_number;
    q.units = units;
    q.memory_limit_bytes = memory_quota(gpu, units, config);
    q.compute_limit_pct = compute_percent(units, config);
    q.weight = q.compute_limit_pct;
    q.mode = config.compute_mode;
    plan.gpus.push_back(q);
  }

  // Environment. The limits file is the authority (a tenant can override env
  // vars); these tell the shim the same thing and help plain debugging.
  std::string uuids;
  for (const auto& q : plan.gpus) uuids += (uuids.empty() ? "" : ",") + q.uuid;
  auto& env = plan.env;
  env["NVIDIA_VISIBLE_DEVICES"] = uuids;
  env["CUSHARE_RUN_DIR"] = config.container_run_dir;
  env["CUSHARE_COMPUTE_MODE"] = std::string(to_string(config.compute_mode));
  for (const auto& q : plan.gpus) {
    env["CUSHARE_MEMORY_LIMIT_" + q.uuid] = std::to_string(q.memory_limit_bytes);
    env["CUSHARE_COMPUTE_LIMIT_" + q.uuid] = std::to_string(q.compute_limit_pct);
  }
  if (plan.gpus.size() == 1) {
    env["CUSHARE_MEMORY_LIMIT"] = std::to_string(plan.gpus[0].memory_limit_bytes);
    env["CUSHARE_COMPUTE_LIMIT"] = std::to_string(plan.gpus[0].compute_limit_pct);
  }
  const bool same_weight = std::all_of(plan.gpus.begin(), plan.gpus.end(), [&](const GpuQuota& q) {
    return q.weight == plan.gpus[0].weight;
  });
  if (same_weight) env["CUSHARE_COMPUTE_WEIGHT"] = std::to_string(plan.gpus[0].weight);

  // Mounts: the folder read-write (the shims write `usage`), then `limits`
  // read-only on top of it, so a tenant cannot raise its own quota.
  plan.mounts.push_back({config.library_container_path, config.library_host_path, true});
  if (config.ld_so_preload) {
    plan.preload_host_path = preload_host_path(config);
    plan.preload_content = config.library_container_path + "\n";
    plan.mounts.push_back({"/etc/ld.so.preload", plan.preload_host_path, true});
  }
  plan.mounts.push_back({config.container_run_dir, plan.host_alloc_dir, false});
  plan.mounts.push_back({join_path(config.container_run_dir, shm::kLimitsName),
                         join_path(plan.host_alloc_dir, shm::kLimitsName), true});

  if (config.device_specs == DeviceSpecStrategy::kDevNodes) {
    for (const auto& q : plan.gpus) {
      const std::string node = fmt::format("/dev/nvidia{}", q.minor_number);
      plan.devices.push_back({node, join_path(config.dev_root, node.substr(1)), "rw"});
    }
    for (const auto& node : inventory.control_nodes) {
      plan.devices.push_back({node, join_path(config.dev_root, node.substr(1)), "rw"});
    }
  }
  if (!config.cdi_kind.empty()) {
    for (const auto& q : plan.gpus) plan.cdi_devices.push_back(config.cdi_kind + "=" + q.uuid);
  }
  plan.annotations[kAllocIdAnnotation] = plan.alloc_id;
  return plan;
}

}  // namespace cushare::plugin
