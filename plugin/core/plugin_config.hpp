// The plugin's configuration: a JSON file (see docs/kubernetes.md,
// "Configuration"), then command-line flags on top. Validation happens once at
// start-up; a bad value stops the plugin with a message naming the key.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "shm/layout.hpp"
#include "shm/run_dir_layout.hpp"

namespace cushare::plugin {

enum class PackingPolicy { kBestFit, kSpread };
enum class DeviceSpecStrategy { kNone, kDevNodes };
// Whether one container's allocation may take units of several GPUs.
// kNone: never (a request must fit on one GPU); kWhole: only whole GPUs
// (a request of k * unitsPerGpu takes k whole GPUs, anything else one GPU);
// kAny: fractions of several GPUs, each with its own quota.
enum class GpuSpanning { kNone, kWhole, kAny };

// One resource served on a set of the node's GPUs, with its own units and
// ratios (docs/kubernetes.md, "Memory and compute chosen separately"): a GPU
// serves one profile, so no request through another resource can be promised
// its memory or its time. Fields left unset take the top-level values.
struct ProfileConfig {
  std::string resource_name;
  std::vector<std::string> gpus;  // NVML indices ("0") or UUIDs
  std::optional<unsigned> units_per_gpu;
  std::optional<double> memory_ratio;
  std::optional<double> compute_ratio;
  std::optional<shm::ComputeMode> compute_mode;
};

struct PluginConfig {
  std::string resource_name = "cushare.io/vgpu";
  unsigned units_per_gpu = 100;
  // Quota of an allocation on one GPU: share = units / units_per_gpu;
  // memory = share * card memory * memory_ratio (<= card memory),
  // compute limit = weight = share * 100 * compute_ratio (clamped to 1..100).
  double memory_ratio = 1.0;
  double compute_ratio = 1.0;
  shm::ComputeMode compute_mode = shm::ComputeMode::kBurst;
  PackingPolicy packing = PackingPolicy::kBestFit;
  GpuSpanning gpu_spanning = GpuSpanning::kNone;
  DeviceSpecStrategy device_specs = DeviceSpecStrategy::kNone;
  std::string cdi_kind;  // e.g. "nvidia.com/gpu": emit "<kind>=<uuid>" CDI names; "" = none
  bool ld_so_preload = true;

  // Host side.
  std::string device_plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string socket_name;  // "" = "cushare-vgpu-<pid>.sock" (unique per instance)
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::string run_dir = shm::kDefaultNodeRunDir;  // allocations live in <run_dir>/alloc/<id>
  std::string library_host_path = "/usr/local/lib/cushare/libcushare.so";
  std::string dev_root = "/";
  std::string sysfs_root = "/sys";
  std::string nvml_library = "libnvidia-ml.so.1";

  // Container side.
  std::string library_container_path = "/usr/local/lib/cushare/libcushare.so";
  std::string container_run_dir = shm::kDefaultNodeRunDir;

  // Health.
  bool health_checks = true;
  std::vector<unsigned long long> ignored_xids = {13, 31, 43, 45, 68, 109};

  // Cleanup of allocation folders of pods that are gone.
  std::chrono::seconds cleanup_interval{60};
  std::chrono::seconds cleanup_min_age{600};       // never remove anything younger
  std::chrono::seconds orphan_age{7 * 24 * 3600};  // fallback rule, see docs/kubernetes.md
  // How often pod identities (metrics labels) are taken from PodResources.
  std::chrono::seconds pod_identity_interval{5};

  std::string log_level = "info";

  // Empty: one resource (the keys above) on every GPU.
  std::vector<ProfileConfig> profiles;
};

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses a JSON document; unknown keys and wrong types are errors naming the
// key. Keys that are absent keep the values already in `base`.
PluginConfig parse_config_json(std::string_view text, PluginConfig base = {});
PluginConfig load_config_file(const std::string& path, PluginConfig base = {});

// Checks ranges and consistency (each profile's too); throws ConfigError.
void validate_config(const PluginConfig& config);

// The configuration one profile is served with: the top-level keys with the
// profile's own on top, and no profiles.
PluginConfig config_for_profile(const PluginConfig& config, const ProfileConfig& profile);
// Every resource the plugin serves: the profiles', or resourceName alone.
std::vector<std::string> resource_names(const PluginConfig& config);

PackingPolicy parse_packing_policy(std::string_view text);
DeviceSpecStrategy parse_device_spec_strategy(std::string_view text);
GpuSpanning parse_gpu_spanning(std::string_view text);
shm::ComputeMode parse_compute_mode(std::string_view text);
std::string_view to_string(PackingPolicy p);
std::string_view to_string(DeviceSpecStrategy s);
std::string_view to_string(GpuSpanning s);
std::string_view to_string(shm::ComputeMode m);

}  // namespace cushare::plugin
