#include "plugin/core/plugin_config.hpp"

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace cushare::plugin {
namespace {

using nlohmann::json;

std::string type_name(const json& v) {
  return v.type_name();
}

template <typename T>
T get(const json& v, const std::string& key);

template <>
std::string get<std::string>(const json& v, const std::string& key) {
  if (!v.is_string()) {
    throw ConfigError(fmt::format("config key '{}' must be a string, got {}", key, type_name(v)));
  }
  return v.get<std::string>();
}

template <>
bool get<bool>(const json& v, const std::string& key) {
  if (!v.is_boolean()) {
    throw ConfigError(
        fmt::format("config key '{}' must be true or false, got {}", key, type_name(v)));
  }
  return v.get<bool>();
}

template <>
double get<double>(const json& v, const std::string& key) {
  if (!v.is_number()) {
    throw ConfigError(fmt::format("config key '{}' must be a number, got {}", key, type_name(v)));
  }
  return v.get<double>();
}

std::uint64_t get_unsigned(const json& v, const std::string& key) {
  if (!v.is_number_unsigned()) {
    throw ConfigError(
        fmt::format("config key '{}' must be a non-negative integer, got {}", key, v.dump()));
  }
  return v.get<std::uint64_t>();
}

template <typename Parse>
auto get_enum(const json& v, const std::string& key, Parse parse) {
  const auto text = get<std::string>(v, key);
  try {
    return parse(text);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("config key '{}': {}", key, e.what()));
  }
}

unsigned get_units_per_gpu(const json& v, const std::string& k) {
  const auto n = get_unsigned(v, k);
  if (n > 100000) throw ConfigError(fmt::format("config key '{}' is too large: {}", k, n));
  return static_cast<unsigned>(n);
}

// A GPU selector: its NVML index or its UUID.
std::string get_gpu_selector(const json& v, const std::string& k) {
  if (v.is_number_unsigned()) return std::to_string(v.get<std::uint64_t>());
  if (v.is_string() && !v.get<std::string>().empty()) return v.get<std::string>();
  throw ConfigError(
      fmt::format("config key '{}' must list GPU indices or UUIDs, got {}", k, v.dump()));
}

ProfileConfig get_profile(const json& v, const std::string& at) {
  if (!v.is_object()) {
    throw ConfigError(fmt::format("config key '{}' must be an object, got {}", at, type_name(v)));
  }
  ProfileConfig p;
  for (const auto& [key, value] : v.items()) {
    const std::string k = fmt::format("{}.{}", at, key);
    if (key == "resourceName") {
      p.resource_name = get<std::string>(value, k);
    } else if (key == "gpus") {
      if (!value.is_array()) throw ConfigError(fmt::format("config key '{}' must be a list", k));
      for (const auto& g : value) p.gpus.push_back(get_gpu_selector(g, k));
    } else if (key == "unitsPerGpu") {
      p.units_per_gpu = get_units_per_gpu(value, k);
    } else if (key == "memoryRatio") {
      p.memory_ratio = get<double>(value, k);
    } else if (key == "computeRatio") {
      p.compute_ratio = get<double>(value, k);
    } else if (key == "computeMode") {
      p.compute_mode = get_enum(value, k, parse_compute_mode);
    } else {
      throw ConfigError(fmt::format("unknown config key '{}'", k));
    }
  }
  if (p.resource_name.empty()) throw ConfigError(fmt::format("{} needs a resourceName", at));
  if (p.gpus.empty()) throw ConfigError(fmt::format("{} needs a list of gpus", at));
  return p;
}

using Setter = std::function<void(PluginConfig&, const json&, const std::string&)>;

const std::map<std::string, Setter>& config_setters() {
  static const std::map<std::string, Setter> setters = {
      {"resourceName", [](auto& c, auto& v, auto& k) { c.resource_name = get<std::string>(v, k); }},
      {"unitsPerGpu", [](auto& c, auto& v, auto& k) { c.units_per_gpu = get_units_per_gpu(v, k); }},
      {"memoryRatio", [](auto& c, auto& v, auto& k) { c.memory_ratio = get<double>(v, k); }},
      {"computeRatio", [](auto& c, auto& v, auto& k) { c.compute_ratio = get<double>(v, k); }},
      {"computeMode",
       [](auto& c, auto& v, auto& k) { c.compute_mode = get_enum(v, k, parse_compute_mode); }},
      {"packing",
       [](auto& c, auto& v, auto& k) { c.packing = get_enum(v, k, parse_packing_policy); }},
      {"gpuSpanning",
       [](auto& c, auto& v, auto& k) { c.gpu_spanning = get_enum(v, k, parse_gpu_spanning); }},
      {"deviceSpecs", [](auto& c, auto& v,
                         auto& k) { c.device_specs = get_enum(v, k, parse_device_spec_strategy); }},
      {"cdiKind", [](auto& c, auto& v, auto& k) { c.cdi_kind = get<std::string>(v, k); }},
      {"ldSoPreload", [](auto& c, auto& v, auto& k) { c.ld_so_preload = get<bool>(v, k); }},
      {"devicePluginDir",
       [](auto& c, auto& v, auto& k) { c.device_plugin_dir = get<std::string>(v, k); }},
      {"socketName", [](auto& c, auto& v, auto& k) { c.socket_name = get<std::string>(v, k); }},
      {"podResourcesSocket",
       [](auto& c, auto& v, auto& k) { c.pod_resources_socket = get<std::string>(v, k); }},
      {"runDir", [](auto& c, auto& v, auto& k) { c.run_dir = get<std::string>(v, k); }},
      {"libraryHostPath",
       [](auto& c, auto& v, auto& k) { c.library_host_path = get<std::string>(v, k); }},
      {"libraryContainerPath",
       [](auto& c, auto& v, auto& k) { c.library_container_path = get<std::string>(v, k); }},
      {"containerRunDir",
       [](auto& c, auto& v, auto& k) { c.container_run_dir = get<std::string>(v, k); }},
      {"devRoot", [](auto& c, auto& v, auto& k) { c.dev_root = get<std::string>(v, k); }},
      {"sysfsRoot", [](auto& c, auto& v, auto& k) { c.sysfs_root = get<std::string>(v, k); }},
      {"nvmlLibrary", [](auto& c, auto& v, auto& k) { c.nvml_library = get<std::string>(v, k); }},
      {"healthChecks", [](auto& c, auto& v, auto& k) { c.health_checks = get<bool>(v, k); }},
      {"ignoredXids",
       [](auto& c, auto& v, auto& k) {
         if (!v.is_array()) {
           throw ConfigError(fmt::format("config key '{}' must be a list of integers", k));
         }
         c.ignored_xids.clear();
         for (const auto& x : v) c.ignored_xids.push_back(get_unsigned(x, k));
       }},
      {"cleanupIntervalSeconds",
       [](auto& c, auto& v, auto& k) {
         c.cleanup_interval = std::chrono::seconds(get_unsigned(v, k));
       }},
      {"cleanupMinAgeSeconds",
       [](auto& c, auto& v, auto& k) {
         c.cleanup_min_age = std::chrono::seconds(get_unsigned(v, k));
       }},
      {"orphanAgeSeconds",
       [](auto& c, auto& v, auto& k) { c.orphan_age = std::chrono::seconds(get_unsigned(v, k)); }},
      {"podIdentityIntervalSeconds",
       [](auto& c, auto& v, auto& k) {
         c.pod_identity_interval = std::chrono::seconds(get_unsigned(v, k));
       }},
      {"logLevel", [](auto& c, auto& v, auto& k) { c.log_level = get<std::string>(v, k); }},
      {"profiles",
       [](auto& c, auto& v, auto& k) {
         if (!v.is_array()) throw ConfigError(fmt::format("config key '{}' must be a list", k));
         c.profiles.clear();
         for (std::size_t i = 0; i < v.size(); ++i)
           c.profiles.push_back(get_profile(v[i], fmt::format("{}[{}]", k, i)));
       }},
  };
  return setters;
}

bool is_absolute(const std::string& p) {
  return !p.empty() && p.front() == '/';
}

}  // namespace

PackingPolicy parse_packing_policy(std::string_view text) {
  if (text == "best-fit" || text == "packed") return PackingPolicy::kBestFit;
  if (text == "spread") return PackingPolicy::kSpread;
  throw ConfigError(fmt::format("unknown packing policy '{}' (expected best-fit or spread)", text));
}

DeviceSpecStrategy parse_device_spec_strategy(std::string_view text) {
  if (text == "none") return DeviceSpecStrategy::kNone;
  if (text == "dev-nodes") return DeviceSpecStrategy::kDevNodes;
  throw ConfigError(
      fmt::format("unknown device-spec strategy '{}' (expected none or dev-nodes)", text));
}

GpuSpanning parse_gpu_spanning(std::string_view text) {
  if (text == "none") return GpuSpanning::kNone;
  if (text == "whole") return GpuSpanning::kWhole;
  if (text == "any") return GpuSpanning::kAny;
  throw ConfigError(
      fmt::format("unknown GPU spanning rule '{}' (expected none, whole or any)", text));
}

shm::ComputeMode parse_compute_mode(std::string_view text) {
  if (text == "burst") return shm::ComputeMode::kBurst;
  if (text == "capped") return shm::ComputeMode::kCapped;
  throw ConfigError(fmt::format("unknown compute mode '{}' (expected burst or capped)", text));
}

std::string_view to_string(PackingPolicy p) {
  return p == PackingPolicy::kSpread ? "spread" : "best-fit";
}
std::string_view to_string(DeviceSpecStrategy s) {
  return s == DeviceSpecStrategy::kDevNodes ? "dev-nodes" : "none";
}
std::string_view to_string(GpuSpanning s) {
  switch (s) {
    case GpuSpanning::kNone:
      return "none";
    case GpuSpanning::kWhole:
      return "whole";
    case GpuSpanning::kAny:
      break;
  }
  return "any";
}
std::string_view to_string(shm::ComputeMode m) {
  return m == shm::ComputeMode::kCapped ? "capped" : "burst";
}

PluginConfig parse_config_json(std::string_view text, PluginConfig base) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ConfigError(fmt::format("config is not valid JSON: {}", e.what()));
  }
  if (!doc.is_object()) {
    throw ConfigError(fmt::format("config must be a JSON object, got {}", doc.type_name()));
  }
  const auto& setters = config_setters();
  for (const auto& [key, value] : doc.items()) {
    const auto it = setters.find(key);
    if (it == setters.end()) {
      throw ConfigError(fmt::format("unknown config key '{}'", key));
    }
    it->second(base, value, key);
  }
  return base;
}

PluginConfig load_config_file(const std::string& path, PluginConfig base) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("cannot read config file '{}'", path));
  std::stringstream text;
  text << in.rdbuf();
  try {
    return parse_config_json(text.str(), std::move(base));
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", path, e.what()));
  }
}

namespace {

// The keys a profile may set, checked for one served resource.
void validate_resource(const PluginConfig& c, const std::string& where) {
  const auto slash = c.resource_name.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == c.resource_name.size() ||
      c.resource_name.starts_with("kubernetes.io/")) {
    throw ConfigError(fmt::format(
        "{}resourceName '{}' must be a domain-prefixed extended resource such as cushare.io/vgpu",
        where, c.resource_name));
  }
  if (c.units_per_gpu < 1 || c.units_per_gpu > 1000) {
    throw ConfigError(
        fmt::format("{}unitsPerGpu must be between 1 and 1000, got {}", where, c.units_per_gpu));
  }
  if (!(c.memory_ratio > 0.0 && c.memory_ratio <= 1.0)) {
    throw ConfigError(
        fmt::format("{}memoryRatio must be in (0, 1], got {}", where, c.memory_ratio));
  }
  if (!(c.compute_ratio > 0.0 && c.compute_ratio <= 1.0)) {
    throw ConfigError(
        fmt::format("{}computeRatio must be in (0, 1], got {}", where, c.compute_ratio));
  }
}

}  // namespace

PluginConfig config_for_profile(const PluginConfig& config, const ProfileConfig& profile) {
  PluginConfig c = config;
  c.profiles.clear();
  c.resource_name = profile.resource_name;
  c.units_per_gpu = profile.units_per_gpu.value_or(config.units_per_gpu);
  c.memory_ratio = profile.memory_ratio.value_or(config.memory_ratio);
  c.compute_ratio = profile.compute_ratio.value_or(config.compute_ratio);
  c.compute_mode = profile.compute_mode.value_or(config.compute_mode);
  return c;
}

std::vector<std::string> resource_names(const PluginConfig& config) {
  if (config.profiles.empty()) return {config.resource_name};
  std::vector<std::string> names;
  for (const auto& p : config.profiles) names.push_back(p.resource_name);
  return names;
}

void validate_config(const PluginConfig& c) {
  validate_resource(c, "");
  std::set<std::string> names, selectors;
  for (std::size_t i = 0; i < c.profiles.size(); ++i) {
    const ProfileConfig& p = c.profiles[i];
    const std::string where = fmt::format("profiles[{}]: ", i);
    validate_resource(config_for_profile(c, p), where);
    if (!names.insert(p.resource_name).second) {
      throw ConfigError(
          fmt::format("{}resource {} is served by two profiles", where, p.resource_name));
    }
    for (const auto& g : p.gpus) {
      if (!selectors.insert(g).second) {
        throw ConfigError(fmt::format("{}GPU {} is in two profiles (a GPU serves one)", where, g));
      }
    }
  }
  const std::pair<const char*, const std::string*> paths[] = {
      {"devicePluginDir", &c.device_plugin_dir},
      {"podResourcesSocket", &c.pod_resources_socket},
      {"runDir", &c.run_dir},
      {"libraryHostPath", &c.library_host_path},
      {"libraryContainerPath", &c.library_container_path},
      {"containerRunDir", &c.container_run_dir},
      {"devRoot", &c.dev_root},
      {"sysfsRoot", &c.sysfs_root},
  };
  for (const auto& [key, value] : paths) {
    if (!is_absolute(*value)) {
      throw ConfigError(fmt::format("{} must be an absolute path, got '{}'", key, *value));
    }
  }
  if (c.socket_name.find('/') != std::string::npos) {
    throw ConfigError(fmt::format("socketName must be a file name inside devicePluginDir, got '{}'",
                                  c.socket_name));
  }
  if (!c.cdi_kind.empty() &&
      (c.cdi_kind.find('/') == std::string::npos || c.cdi_kind.find('=') != std::string::npos)) {
    throw ConfigError(
        fmt::format("cdiKind must look like 'vendor.com/class', got '{}'", c.cdi_kind));
  }
  if (c.cleanup_interval.count() < 1) throw ConfigError("cleanupIntervalSeconds must be >= 1");
  if (c.pod_identity_interval.count() < 1) {
    throw ConfigError("podIdentityIntervalSeconds must be >= 1");
  }
  if (c.orphan_age < c.cleanup_min_age) {
    throw ConfigError("orphanAgeSeconds must not be smaller than cleanupMinAgeSeconds");
  }
  static const char* const kLevels[] = {"trace", "debug",    "info", "warn",
                                        "error", "critical", "off"};
  bool level_ok = false;
  for (const char* l : kLevels) level_ok = level_ok || c.log_level == l;
  if (!level_ok) throw ConfigError(fmt::format("logLevel '{}' is not a spdlog level", c.log_level));
}

}  // namespace cushare::plugin
