// cushare-device-plugin: advertises every GPU of the node as `units` shares
// of cushare.io/vgpu and turns the kubelet's Allocate into quota files and
// container edits. See docs/kubernetes.md.
#include <signal.h>

#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "plugin/core/allocation_plan.hpp"
#include "plugin/core/device_id.hpp"
#include "plugin/core/plugin_config.hpp"
#include "plugin/core/served_profiles.hpp"
#include "plugin/node/allocation_cleaner.hpp"
#include "plugin/node/allocation_store.hpp"
#include "plugin/node/device_health.hpp"
#include "plugin/node/health_watcher.hpp"
#include "plugin/node/identity_publisher.hpp"
#include "plugin/node/nvml_library.hpp"
#include "plugin/node/plugin_runner.hpp"
#include "shm/mapping_guard.hpp"
#include "shm/run_dir_layout.hpp"

#ifndef CUSHARE_VERSION
#error "CUSHARE_VERSION comes from project(VERSION) in the top-level CMakeLists.txt"
#endif

namespace {

using namespace cushare::plugin;
namespace fs = std::filesystem;

// Command-line overrides: each one, when given, replaces the config file's value.
struct Overrides {
  std::optional<std::string> resource_name, packing, gpu_spanning, compute_mode, device_specs,
      cdi_kind, device_plugin_dir, socket_name, pod_resources_socket, run_dir, library_host_path,
      library_container_path, container_run_dir, dev_root, sysfs_root, nvml_library, log_level;
  std::optional<unsigned> units_per_gpu;
  std::optional<double> memory_ratio, compute_ratio;
  std::optional<bool> health_checks, ld_so_preload;
  std::optional<std::uint64_t> cleanup_interval, cleanup_min_age, orphan_age, pod_identity_interval;

  void add_to(CLI::App& app) {
    app.add_option("--resource-name", resource_name, "extended resource (cushare.io/vgpu)");
    app.add_option("--units-per-gpu", units_per_gpu, "device IDs advertised per GPU (100)");
    app.add_option("--memory-ratio", memory_ratio, "memory quota = share x card x ratio (1.0)");
    app.add_option("--compute-ratio", compute_ratio, "compute limit = share x 100 x ratio (1.0)");
    app.add_option("--compute-mode", compute_mode, "burst | capped");
    app.add_option("--packing", packing, "best-fit | spread");
    app.add_option("--gpu-spanning", gpu_spanning, "none | whole | any (none)");
    app.add_option("--device-specs", device_specs, "none | dev-nodes");
    app.add_option("--cdi-kind", cdi_kind, "emit CDI names <kind>=<uuid>, e.g. nvidia.com/gpu");
    app.add_option("--ld-so-preload", ld_so_preload, "mount a generated /etc/ld.so.preload");
    app.add_option("--device-plugin-dir", device_plugin_dir, "kubelet device-plugin folder");
    app.add_option("--socket-name", socket_name, "socket file name (default: unique per start)");
    app.add_option("--pod-resources-socket", pod_resources_socket, "kubelet PodResources socket");
    app.add_option("--run-dir", run_dir, "node run dir holding alloc/<id>/");
    app.add_option("--library-host-path", library_host_path, "libcushare.so on the host");
    app.add_option("--library-container-path", library_container_path,
                   "libcushare.so in the container");
    app.add_option("--container-run-dir", container_run_dir, "CUSHARE_RUN_DIR in the container");
    app.add_option("--dev-root", dev_root, "host root of /dev nodes");
    app.add_option("--sysfs-root", sysfs_root, "sysfs root for NUMA lookups");
    app.add_option("--nvml-library", nvml_library, "NVML library to dlopen");
    app.add_option("--health-checks", health_checks, "watch NVML XID events");
    app.add_option("--cleanup-interval-seconds", cleanup_interval, "cleanup period");
    app.add_option("--cleanup-min-age-seconds", cleanup_min_age, "never remove younger folders");
    app.add_option("--orphan-age-seconds", orphan_age, "age rule without a liveness source");
    app.add_option("--pod-identity-interval-seconds", pod_identity_interval,
                   "how often pod identities for metrics are read from PodResources (5)");
    // Checked here so the error names the flag; the config file's logLevel
    // is checked by validate_config.
    app.add_option("--log-level", log_level, "trace | debug | info | warn | error | critical | off")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  }

  void apply_to(PluginConfig& c) const {
    auto set = [](auto& field, const auto& value) {
      if (value) field = *value;
    };
    set(c.resource_name, resource_name);
    set(c.units_per_gpu, units_per_gpu);
    set(c.memory_ratio, memory_ratio);
    set(c.compute_ratio, compute_ratio);
    if (compute_mode) c.compute_mode = parse_compute_mode(*compute_mode);
    if (packing) c.packing = parse_packing_policy(*packing);
    if (gpu_spanning) c.gpu_spanning = parse_gpu_spanning(*gpu_spanning);
    if (device_specs) c.device_specs = parse_device_spec_strategy(*device_specs);
    set(c.cdi_kind, cdi_kind);
    set(c.ld_so_preload, ld_so_preload);
    set(c.device_plugin_dir, device_plugin_dir);
    set(c.socket_name, socket_name);
    set(c.pod_resources_socket, pod_resources_socket);
    set(c.run_dir, run_dir);
    set(c.library_host_path, library_host_path);
    set(c.library_container_path, library_container_path);
    set(c.container_run_dir, container_run_dir);
    set(c.dev_root, dev_root);
    set(c.sysfs_root, sysfs_root);
    set(c.nvml_library, nvml_library);
    set(c.health_checks, health_checks);
    if (cleanup_interval) c.cleanup_interval = std::chrono::seconds(*cleanup_interval);
    if (cleanup_min_age) c.cleanup_min_age = std::chrono::seconds(*cleanup_min_age);
    if (orphan_age) c.orphan_age = std::chrono::seconds(*orphan_age);
    if (pod_identity_interval) {
      c.pod_identity_interval = std::chrono::seconds(*pod_identity_interval);
    }
    set(c.log_level, log_level);
  }
};

std::vector<std::string> present_control_nodes(const PluginConfig& config) {
  std::vector<std::string> nodes;
  for (const char* n :
       {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}) {
    std::error_code ec;
    if (fs::exists(fs::path(config.dev_root) / (n + 1), ec)) nodes.emplace_back(n);
  }
  return nodes;
}

// "resource R with N units per GPU, mode M" for each resource served.
std::string describe_resources(const PluginConfig& config) {
  std::vector<PluginConfig> served;
  if (config.profiles.empty()) served.push_back(config);
  for (const auto& p : config.profiles) served.push_back(config_for_profile(config, p));
  std::string out;
  for (std::size_t i = 0; i < served.size(); ++i) {
    const PluginConfig& c = served[i];
    out += fmt::format("{}resource {} with {} units per GPU, mode {}", i ? "; " : "",
                       c.resource_name, c.units_per_gpu, to_string(c.compute_mode));
    if (!config.profiles.empty()) out += fmt::format(" on GPUs {}", config.profiles[i].gpus);
  }
  return out;
}

// Runs every runner on its own thread until all have returned. The first to
// return (a shutdown, or a socket it cannot serve) stops the others; the
// first error is rethrown.
void run_all(std::vector<std::unique_ptr<PluginRunner>>& runners) {
  std::mutex mu;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  threads.reserve(runners.size());
  for (auto& runner : runners) {
    threads.emplace_back([&, r = runner.get()] {
      try {
        r->run();
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first_error) first_error = std::current_exception();
      }
      for (auto& other : runners) other->request_shutdown();
    });
  }
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace

// An exception no step below handles ends the plugin with a message and exit
// status 1, not an abort.
int main(int argc, char** argv) try {
  cushare::shm::install_mapping_guard();  // the cleaner reads tenants' usage regions
  CLI::App app{"cushare-device-plugin: fractional GPUs (cushare.io/vgpu) for the kubelet",
               "cushare-device-plugin"};
  app.set_version_flag("--version", std::string("cushare-device-plugin ") + CUSHARE_VERSION);
  std::string config_path;
  bool check_config = false;
  Overrides overrides;
  app.add_option("-c,--config", config_path, "JSON config file (see docs/kubernetes.md)");
  app.add_flag("--check-config", check_config, "validate the configuration, print it and exit");
  overrides.add_to(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version: printed, exit 0
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Every usage error is 2 (CLI11's own codes, 106, 109, ..., mean nothing
    // to the kubelet's operator), like a bad configuration.
    fmt::print(stderr, "cushare-device-plugin: {} (see cushare-device-plugin --help)\n", e.what());
    return 2;
  }

  PluginConfig config;
  try {
    if (!config_path.empty()) config = load_config_file(config_path);
    overrides.apply_to(config);
    validate_config(config);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "cushare-device-plugin: bad configuration: {}\n", e.what());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  if (check_config) {
    fmt::print("configuration OK: {}, packing {}, GPU spanning {}\n", describe_resources(config),
               to_string(config.packing), to_string(config.gpu_spanning));
    return 0;
  }

  // Signals go to one thread that asks the runner to stop.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  try {
    NvmlLibrary nvml(config.nvml_library);
    Inventory inventory = nvml.discover(config.sysfs_root);
    inventory.control_nodes = present_control_nodes(config);
    for (const auto& g : inventory.gpus) {
      spdlog::info("GPU {}: {} {} ({} MiB, PCI {}, NUMA {})", g.index, g.uuid, g.name,
                   g.memory_bytes >> 20, g.pci_bus_id, g.numa_node);
    }
    if (inventory.gpus.empty()) spdlog::warn("no GPU found: advertising no devices");
    const ProfilePlan plan = plan_profiles(config, inventory);
    for (const auto& uuid : plan.unassigned_gpus) {
      spdlog::warn("GPU {} is in no profile: not advertised", uuid);
    }
    for (const auto& p : plan.profiles) {
      for (const auto& g : p.inventory.gpus) {
        if (format_device_id(g.uuid, p.config.units_per_gpu - 1).size() > kMaxDeviceIdLength) {
          spdlog::error("device IDs of GPU {} exceed the kubelet's {}-character limit", g.uuid,
                        kMaxDeviceIdLength);
        }
      }
    }
    fs::create_directories(fs::path(config.run_dir) / cushare::shm::kAllocDirName);

    DeviceHealth health;
    AllocationStore store(config.run_dir);
    HealthWatcher health_watcher(nvml, inventory, config, health);
    if (config.health_checks) health_watcher.start();
    AllocationCleaner cleaner(config, store);
    cleaner.start();
    IdentityPublisher identities(config);
    identities.start();
    // One registration per resource: each runner serves its own socket and
    // re-registers on its own; the first to end (a shutdown, or an error)
    // ends them all.
    std::vector<std::unique_ptr<PluginRunner>> runners;
    for (const auto& p : plan.profiles) {
      runners.push_back(std::make_unique<PluginRunner>(p.inventory, p.config, health, store));
    }
    auto shutdown_all = [&] {
      for (auto& r : runners) r->request_shutdown();
    };

    std::thread signal_thread([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      spdlog::info("signal {}: shutting down", sig);
      shutdown_all();
    });

    // The signal thread uses the runners: before they go (normally or by an
    // exception), wake the thread if no signal came (SIGTERM is blocked
    // everywhere, so it stays pending for that thread) and wait for it.
    struct SignalThreadJoiner {
      std::thread& thread;
      ~SignalThreadJoiner() {
        // Wakes its sigwait (SIGTERM is blocked in every thread): kills nothing.
        // NOLINTNEXTLINE(bugprone-bad-signal-to-kill-thread)
        pthread_kill(thread.native_handle(), SIGTERM);
        thread.join();
      }
    } joiner{signal_thread};

    run_all(runners);
    health.close();
    cleaner.stop();
    identities.stop();
    health_watcher.stop();
  } catch (const ConfigError& e) {  // profiles that do not fit this node's GPUs
    fmt::print(stderr, "cushare-device-plugin: bad configuration: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::critical("cushare-device-plugin: {}", e.what());
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  spdlog::critical("cushare-device-plugin: {}", e.what());
  return 1;
}
