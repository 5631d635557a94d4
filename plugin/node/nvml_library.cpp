#include "plugin/node/nvml_library.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <fstream>

#include <fmt/format.h>

namespace cushare::plugin {
namespace {

template <typename Fn>
Fn resolve(void* handle, const char* name, bool required) {
  const Fn fn = nvml::symbol<Fn>(handle, name);
  if (fn == nullptr && required) {
    throw NvmlError(fmt::format("NVML library lacks {}", name));
  }
  return fn;
}

}  // namespace

NvmlLibrary::NvmlLibrary(const std::string& library) {
  handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* err = dlerror();
    throw NvmlError(fmt::format("cannot load NVML ('{}'): {}", library, err ? err : "unknown"));
  }
  try {
    auto init = resolve<nvml::InitFn>(handle_, "nvmlInit_v2", true);
    shutdown_ = resolve<nvml::ShutdownFn>(handle_, "nvmlShutdown", true);
    error_string_ = resolve<nvml::ErrorStringFn>(handle_, "nvmlErrorString", false);
    device_get_count = resolve<nvml::DeviceGetCountFn>(handle_, "nvmlDeviceGetCount_v2", true);
    device_get_handle_by_index =
        resolve<nvml::DeviceGetHandleByIndexFn>(handle_, "nvmlDeviceGetHandleByIndex_v2", true);
    device_get_uuid = resolve<nvml::DeviceGetStringFn>(handle_, "nvmlDeviceGetUUID", true);
    device_get_name = resolve<nvml::DeviceGetStringFn>(handle_, "nvmlDeviceGetName", true);
    device_get_memory_info =
        resolve<nvml::DeviceGetMemoryInfoFn>(handle_, "nvmlDeviceGetMemoryInfo", true);
    device_get_pci_info =
        resolve<nvml::DeviceGetPciInfoFn>(handle_, "nvmlDeviceGetPciInfo_v3", true);
    device_get_minor_number =
        resolve<nvml::DeviceGetMinorNumberFn>(handle_, "nvmlDeviceGetMinorNumber", false);
    event_set_create = resolve<nvml::EventSetCreateFn>(handle_, "nvmlEventSetCreate", false);
    device_register_events =
        resolve<nvml::DeviceRegisterEventsFn>(handle_, "nvmlDeviceRegisterEvents", false);
    event_set_wait = resolve<nvml::EventSetWaitFn>(handle_, "nvmlEventSetWait_v2", false);
    event_set_free = resolve<nvml::EventSetFreeFn>(handle_, "nvmlEventSetFree", false);
    const nvml::Return r = init();
    if (r != nvml::kSuccess)
      throw NvmlError(fmt::format("nvmlInit_v2 failed: {}", error_string(r)));
  } catch (...) {
    dlclose(handle_);
    throw;
  }
}

NvmlLibrary::~NvmlLibrary() {
  if (shutdown_ != nullptr) shutdown_();
  // The library stays loaded: NVML may have threads that outlive shutdown.
}

std::string NvmlLibrary::error_string(nvml::Return r) const {
  const char* s = error_string_ != nullptr ? error_string_(r) : nullptr;
  return s != nullptr ? fmt::format("{} ({})", s, r) : fmt::format("NVML error {}", r);
}

Inventory NvmlLibrary::discover(const std::string& sysfs_root) const {
  auto check = [&](nvml::Return r, const char* what, unsigned i) {
    if (r != nvml::kSuccess) {
      throw NvmlError(fmt::format("{} for GPU {} failed: {}", what, i, error_string(r)));
    }
  };
  unsigned count = 0;
  const nvml::Return r = device_get_count(&count);
  if (r != nvml::kSuccess) throw NvmlError("nvmlDeviceGetCount_v2 failed: " + error_string(r));
  Inventory inv;
  for (unsigned i = 0; i < count; ++i) {
    nvml::Device dev = nullptr;
    check(device_get_handle_by_index(i, &dev), "nvmlDeviceGetHandleByIndex_v2", i);
    GpuInfo g;
    g.index = static_cast<int>(i);
    char buf[nvml::kDeviceUuidBufferSize] = {};
    check(device_get_uuid(dev, buf, sizeof buf), "nvmlDeviceGetUUID", i);
    g.uuid = buf;
    char name[nvml::kDeviceNameBufferSize] = {};
    check(device_get_name(dev, name, sizeof name), "nvmlDeviceGetName", i);
    g.name = name;
    nvml::Memory mem{};
    check(device_get_memory_info(dev, &mem), "nvmlDeviceGetMemoryInfo", i);
    g.memory_bytes = mem.total;
    nvml::PciInfo pci{};
    check(device_get_pci_info(dev, &pci), "nvmlDeviceGetPciInfo_v3", i);
    g.pci_bus_id = pci.busId;
    unsigned minor = i;
    if (device_get_minor_number != nullptr &&
        device_get_minor_number(dev, &minor) != nvml::kSuccess) {
      minor = i;
    }
    g.minor_number = minor;
    g.numa_node = numa_node_from_sysfs(sysfs_root, g.pci_bus_id);
    inv.gpus.push_back(std::move(g));
  }
  return inv;
}

int numa_node_from_sysfs(const std::string& sysfs_root, const std::string& nvml_bus_id) {
  std::string id = nvml_bus_id;
  std::transform(id.begin(), id.end(), id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const auto colon = id.find(':');
  if (colon == 8) id = id.substr(4);  // NVML's 8-digit domain -> sysfs's 4 digits
  std::ifstream in(sysfs_root + "/bus/pci/devices/" + id + "/numa_node");
  int node = kUnknownNumaNode;
  if (!(in >> node) || node < 0) return kUnknownNumaNode;
  return node;
}

}  // namespace cushare::plugin
