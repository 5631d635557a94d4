// nvml: what a process under the shim sees through NVML (nvidia-smi's source):
// device memory total/used/free, plain and _v2. No CUDA call is made, as with
// nvidia-smi. nvml.h is not part of the CUDA toolkit, so the few types needed
// are declared here.
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include "tests/gpu/probe/messages.hpp"
#include "tests/gpu/probe/modes.hpp"

namespace cushare::gpuprobe {
namespace {

using nvmlReturn = int;
using nvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlMemoryV2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
constexpr unsigned int kNvmlMemoryV2Version = sizeof(NvmlMemoryV2) | (2u << 24);

template <typename Fn>
Fn symbol(void* lib, const char* name, bool required = true) {
  void* fn = dlsym(lib, name);
  if (fn == nullptr && required) {
    throw std::runtime_error(std::string("libnvidia-ml.so.1 does not provide ") + name);
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

int runNvml(const NvmlOptions& o) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) throw std::runtime_error("cannot load libnvidia-ml.so.1");
  auto init = symbol<nvmlReturn (*)()>(lib, "nvmlInit_v2");
  auto shutdown = symbol<nvmlReturn (*)()>(lib, "nvmlShutdown");
  auto byIndex =
      symbol<nvmlReturn (*)(unsigned, nvmlDevice*)>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto byUuid = symbol<nvmlReturn (*)(const char*, nvmlDevice*)>(lib, "nvmlDeviceGetHandleByUUID");
  auto memInfo = symbol<nvmlReturn (*)(nvmlDevice, NvmlMemory*)>(lib, "nvmlDeviceGetMemoryInfo");
  auto memInfoV2 =
      symbol<nvmlReturn (*)(nvmlDevice, NvmlMemoryV2*)>(lib, "nvmlDeviceGetMemoryInfo_v2", false);

  if (nvmlReturn r = init(); r != 0)
    throw std::runtime_error("nvmlInit_v2 failed: " + std::to_string(r));
  nvmlDevice dev = nullptr;
  nvmlReturn r = o.uuid.empty() ? byIndex(0, &dev) : byUuid(o.uuid.c_str(), &dev);
  if (r != 0) throw std::runtime_error("NVML device lookup failed: " + std::to_string(r));
  NvmlMemory mem{};
  nlohmann::json msg{{"event", "nvml"}};
  msg["status"] = memInfo(dev, &mem);
  msg["total"] = mem.total;
  msg["used"] = mem.used;
  msg["free"] = mem.free;
  if (memInfoV2 != nullptr) {
    NvmlMemoryV2 v2{};
    v2.version = kNvmlMemoryV2Version;
    nvmlReturn r2 = memInfoV2(dev, &v2);
    msg["v2"] = {{"status", r2},
                 {"total", v2.total},
                 {"used", v2.used},
                 {"free", v2.free},
                 {"reserved", v2.reserved}};
  }
  emit(msg);
  shutdown();
  return 0;
}

}  // namespace cushare::gpuprobe
