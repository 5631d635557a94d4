#include "node/gpu_info.hpp"

#include <dlfcn.h>

#include <array>

namespace cushare::tools {

namespace {

// The few NVML entry points used, with their real ABI.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
using InitFn = nvmlReturn_t (*)();
using CountFn = nvmlReturn_t (*)(unsigned*);
using HandleFn = nvmlReturn_t (*)(unsigned, nvmlDevice_t*);
using StringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);
using MemoryFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);

template <typename Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

}  // namespace

std::vector<GpuInfo> query_gpus_nvml() {
  std::vector<GpuInfo> gpus;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return gpus;
  const auto init = symbol<InitFn>(lib, "nvmlInit_v2");
  const auto shutdown = symbol<InitFn>(lib, "nvmlShutdown");
  const auto count_fn = symbol<CountFn>(lib, "nvmlDeviceGetCount_v2");
  const auto handle_fn = symbol<HandleFn>(lib, "nvmlDeviceGetHandleByIndex_v2");
  const auto uuid_fn = symbol<StringFn>(lib, "nvmlDeviceGetUUID");
  const auto name_fn = symbol<StringFn>(lib, "nvmlDeviceGetName");
  const auto memory_fn = symbol<MemoryFn>(lib, "nvmlDeviceGetMemoryInfo");
  if (init && shutdown && count_fn && handle_fn && uuid_fn && init() == 0) {
    unsigned count = 0;
    if (count_fn(&count) == 0) {
      for (unsigned i = 0; i < count; ++i) {
        nvmlDevice_t dev = nullptr;
        if (handle_fn(i, &dev) != 0) continue;
        GpuInfo info;
        info.index = static_cast<int>(i);
        std::array<char, 96> buf{};
        if (uuid_fn(dev, buf.data(), buf.size()) == 0) info.uuid = buf.data();
        buf.fill(0);
        if (name_fn && name_fn(dev, buf.data(), buf.size()) == 0) info.name = buf.data();
        nvmlMemory_t mem{};
        if (memory_fn && memory_fn(dev, &mem) == 0) info.memory_total_bytes = mem.total;
        gpus.push_back(std::move(info));
      }
    }
    shutdown();
  }
  dlclose(lib);
  return gpus;
}

}  // namespace cushare::tools
