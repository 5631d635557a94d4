// The pure core of Allocate: (GPU inventory, granted device IDs, config) ->
// everything the container needs (quotas, env, mounts, device nodes, CDI
// names). No I/O happens here, so the same plan can be returned to the
// kubelet today and emitted as a CDI spec for DRA later.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "plugin/core/gpu_inventory.hpp"
#include "plugin/core/plugin_config.hpp"
#include "shm/layout.hpp"

namespace cushare::plugin {

struct GpuQuota {
  std::string uuid;
  int gpu_index = 0;          // host NVML index (for logs)
  unsigned minor_number = 0;  // /dev/nvidia<minor>
  unsigned units = 0;
  std::uint64_t memory_limit_bytes = 0;
  unsigned compute_limit_pct = 100;
  unsigned weight = 100;
  shm::ComputeMode mode = shm::ComputeMode::kBurst;
};

struct MountEdit {
  std::string container_path;
  std::string host_path;
  bool read_only = true;
  friend bool operator==(const MountEdit&, const MountEdit&) = default;
};

struct DeviceNodeEdit {
  std::string container_path;
  std::string host_path;
  std::string permissions = "rw";
  friend bool operator==(const DeviceNodeEdit&, const DeviceNodeEdit&) = default;
};

struct AllocationPlan {
  std::string alloc_id;        // stable hash of the sorted device IDs
  std::string host_alloc_dir;  // <run_dir>/alloc/<alloc_id>
  std::vector<GpuQuota> gpus;  // in host inventory order
  std::map<std::string, std::string> env;
  std::vector<MountEdit> mounts;
  std::vector<DeviceNodeEdit> devices;
  std::vector<std::string> cdi_devices;
  std::map<std::string, std::string> annotations;
  // The generated /etc/ld.so.preload, shared by every allocation of the node.
  std::string preload_host_path;  // "" when ldSoPreload is off
  std::string preload_content;
};

class AllocationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr char kAllocIdAnnotation[] = "cushare.io/alloc-id";

// Stable across processes, restarts and architectures: FNV-1a 64 over the
// sorted IDs joined with '\n', as "a" + 16 lower-case hex digits.
std::string allocation_id_for(std::span<const std::string> device_ids);

// Host folder that holds an allocation's regions.
std::string host_allocation_dir(const PluginConfig& config, const std::string& alloc_id);
std::string preload_host_path(const PluginConfig& config);

// Throws AllocationError (naming the offending ID) for an empty request, a
// malformed, duplicated or unknown ID, a unit out of range, or units of
// several GPUs that config.gpu_spanning does not allow.
AllocationPlan plan_allocation(const Inventory& inventory, std::span<const std::string> device_ids,
                               const PluginConfig& config);

}  // namespace cushare::plugin
