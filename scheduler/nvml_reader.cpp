#include "scheduler/nvml_reader.hpp"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <vector>

namespace cushare::sched {
namespace {
// nvmlProcessInfo_t (v2/v3 layout, NVML's stable ABI; the build machines
// have no nvml.h).
struct ProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr int kSuccess = 0;
constexpr int kInsufficientSize = 7;
}  // namespace

NvmlReader::NvmlReader() {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    spdlog::info("NVML not available ({}); context overhead stays the shims' estimate", dlerror());
    return;
  }
  auto init = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlInit_v2"));
  get_handle_by_uuid_ =
      reinterpret_cast<decltype(get_handle_by_uuid_)>(dlsym(lib_, "nvmlDeviceGetHandleByUUID"));
  get_processes_ = reinterpret_cast<decltype(get_processes_)>(
      dlsym(lib_, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (!get_processes_) {
    get_processes_ = reinterpret_cast<decltype(get_processes_)>(
        dlsym(lib_, "nvmlDeviceGetComputeRunningProcesses_v2"));
  }
  shutdown_ = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlShutdown"));
  if (!init || !get_handle_by_uuid_ || !get_processes_) {
    spdlog::warn("NVML lacks the functions the daemon needs; no overhead reconciliation");
    return;
  }
  const int rc = init();
  init_ok_ = rc == kSuccess;
  if (!init_ok_) spdlog::warn("nvmlInit_v2 failed ({}); no overhead reconciliation", rc);
}

NvmlReader::~NvmlReader() {
  if (init_ok_ && shutdown_) shutdown_();
  if (lib_) dlclose(lib_);
}

std::optional<std::map<std::uint32_t, std::uint64_t>> NvmlReader::process_memory(
    const std::string& uuid) {
  if (!init_ok_) return std::nullopt;
  Device dev = nullptr;
  if (get_handle_by_uuid_(uuid.c_str(), &dev) != kSuccess) return std::nullopt;
  std::vector<ProcessInfo> infos(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = static_cast<unsigned int>(infos.size());
    const int rc = get_processes_(dev, &count, infos.data());
    if (rc == kInsufficientSize) {
      infos.resize(std::max<std::size_t>(count + 16, infos.size() * 2));
      continue;
    }
    if (rc != kSuccess) return std::nullopt;
    std::map<std::uint32_t, std::uint64_t> out;
    for (unsigned int i = 0; i < count && i < infos.size(); ++i) {
      out[infos[i].pid] += infos[i].usedGpuMemory;
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace cushare::sched
