#include "node/gpu_info.hpp"

#include <dlfcn.h>

#include <array>

#include "shm/nvml_api.hpp"

namespace cushare::tools {

std::vector<GpuInfo> query_gpus_nvml() {
  std::vector<GpuInfo> gpus;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return gpus;
  const auto init = nvml::symbol<nvml::InitFn>(lib, "nvmlInit_v2");
  const auto shutdown = nvml::symbol<nvml::ShutdownFn>(lib, "nvmlShutdown");
  const auto count_fn = nvml::symbol<nvml::DeviceGetCountFn>(lib, "nvmlDeviceGetCount_v2");
  const auto handle_fn =
      nvml::symbol<nvml::DeviceGetHandleByIndexFn>(lib, "nvmlDeviceGetHandleByIndex_v2");
  const auto uuid_fn = nvml::symbol<nvml::DeviceGetStringFn>(lib, "nvmlDeviceGetUUID");
  const auto name_fn = nvml::symbol<nvml::DeviceGetStringFn>(lib, "nvmlDeviceGetName");
  const auto memory_fn = nvml::symbol<nvml::DeviceGetMemoryInfoFn>(lib, "nvmlDeviceGetMemoryInfo");
  if (init && shutdown && count_fn && handle_fn && uuid_fn && init() == nvml::kSuccess) {
    unsigned count = 0;
    if (count_fn(&count) == nvml::kSuccess) {
      for (unsigned i = 0; i < count; ++i) {
        nvml::Device dev = nullptr;
        if (handle_fn(i, &dev) != nvml::kSuccess) continue;
        GpuInfo info;
        info.index = static_cast<int>(i);
        std::array<char, nvml::kDeviceUuidBufferSize> buf{};
        if (uuid_fn(dev, buf.data(), buf.size()) == nvml::kSuccess) info.uuid = buf.data();
        buf.fill(0);
        if (name_fn && name_fn(dev, buf.data(), buf.size()) == nvml::kSuccess)
          info.name = buf.data();
        nvml::Memory mem{};
        if (memory_fn && memory_fn(dev, &mem) == nvml::kSuccess)
          info.memory_total_bytes = mem.total;
        gpus.push_back(std::move(info));
      }
    }
    shutdown();
  }
  dlclose(lib);
  return gpus;
}

}  // namespace cushare::tools
