// dlopen'ed NVML: resolves the entry points the plugin needs once, and keeps
// the library initialised for the plugin's lifetime (discovery at start-up,
// then the health watcher's event set).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "plugin/core/gpu_inventory.hpp"
#include "shm/nvml_api.hpp"

namespace cushare::plugin {

class NvmlError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class NvmlLibrary {
 public:
  // Opens `library` (e.g. "libnvidia-ml.so.1") and calls nvmlInit_v2; throws NvmlError.
  explicit NvmlLibrary(const std::string& library);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // Every GPU with UUID, name, memory, PCI bus id and minor number; the NUMA
  // node comes from <sysfs_root>/bus/pci/devices/<bus id>/numa_node.
  Inventory discover(const std::string& sysfs_root) const;

  std::string error_string(nvml::Return r) const;

  nvml::DeviceGetCountFn device_get_count = nullptr;
  nvml::DeviceGetHandleByIndexFn device_get_handle_by_index = nullptr;
  nvml::DeviceGetStringFn device_get_uuid = nullptr;
  nvml::DeviceGetStringFn device_get_name = nullptr;
  nvml::DeviceGetMemoryInfoFn device_get_memory_info = nullptr;
  nvml::DeviceGetPciInfoFn device_get_pci_info = nullptr;
  nvml::DeviceGetMinorNumberFn device_get_minor_number = nullptr;  // optional
  nvml::EventSetCreateFn event_set_create = nullptr;               // optional (health)
  nvml::DeviceRegisterEventsFn device_register_events = nullptr;   // optional (health)
  nvml::EventSetWaitFn event_set_wait = nullptr;                   // optional (health)
  nvml::EventSetFreeFn event_set_free = nullptr;                   // optional (health)

 private:
  void* handle_ = nullptr;
  nvml::ShutdownFn shutdown_ = nullptr;
  nvml::ErrorStringFn error_string_ = nullptr;
};

// NUMA node of a PCI device from sysfs: the bus id is lower-cased and its
// 8-digit NVML domain shortened to sysfs's 4 digits; -1 or an unreadable
// file gives kUnknownNumaNode.
int numa_node_from_sysfs(const std::string& sysfs_root, const std::string& nvml_bus_id);

}  // namespace cushare::plugin
