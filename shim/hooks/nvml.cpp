// NVML virtualisation: memory figures of the quota view (memory_view.hpp),
// and compute-process lists filtered to this allocation's processes (by host
// PID when the daemon has recorded it, else by PID: correct outside PID
// namespaces). Devices outside the allocation and a disabled shim see the
// real figures; an unusable environment or region makes memory queries
// fail (NVML_ERROR_UNKNOWN, the reason logged) rather than show a whole GPU.
#include <cstring>
#include <string>
#include <vector>

#include "shim/accounting/memory_view.hpp"
#include "shim/hooks/decls.hpp"
#include "shim/hooks/support.hpp"
#include "shim/process/allocation_state.hpp"
#include "shm/limits_seqlock.hpp"
#include "shm/process_slots.hpp"

namespace cushare::shim {
namespace {

struct GpuView {
  const shm::LimitsRegion* limits = nullptr;
  const shm::UsageRegion* usage = nullptr;
  unsigned gpu = kNoGpu;
  bool failed = false;  // no usable quota (logged): memory queries fail closed
};

GpuView view_of(nvml::Device dev) {
  const RegionView rv = region_view();
  const RealNvml& n = real_nvml();
  if (rv.failed) return {.failed = true};
  if (!rv.limits || !rv.usage || !n.nvmlDeviceGetUUID) return {};
  char uuid[nvml::kDeviceUuidBufferSize] = {};
  if (n.nvmlDeviceGetUUID(dev, uuid, sizeof uuid) != nvml::kSuccess) return {};
  auto idx = shm::find_gpu_entry(*rv.limits, uuid);
  if (!idx || *idx >= shm::kMaxGpus) return {};
  return {rv.limits, rv.usage, *idx};
}

MemoryView quota_view(const GpuView& g, std::uint64_t total, std::uint64_t free) {
  return virtual_memory(g.limits->gpus[g.gpu].memory_limit_bytes.load(std::memory_order_relaxed),
                        g.usage->gpus[g.gpu].used_bytes.load(std::memory_order_acquire), total,
                        free);
}

bool ours(const shm::UsageRegion& usage, unsigned pid) {
  for (const auto& slot : usage.slots) {
    if (shm::slot_state(slot) != shm::SlotState::kActive) continue;
    const unsigned host = slot.host_pid.load(std::memory_order_relaxed);
    if ((host ? host : slot.pid.load(std::memory_order_relaxed)) == pid) return true;
  }
  return false;
}

// Runs the real list query into a buffer of our own, keeps our processes,
// and hands the caller NVML's contract: *count in/out, INSUFFICIENT_SIZE
// with the needed count when the caller's array is too small.
template <class Info, class Query>
nvml::Return filtered_processes(nvml::Device dev, unsigned int* count, Info* infos, Query&& query) {
  if (!count) return query(dev, count, infos);
  const GpuView g = view_of(dev);
  if (!g.usage) return query(dev, count, infos);
  std::vector<Info> all(64);
  nvml::Return rc;
  for (;;) {
    unsigned int n = static_cast<unsigned int>(all.size());
    rc = query(dev, &n, all.data());
    if (rc == nvml::kErrorInsufficientSize && n > all.size()) {
      all.resize(n + 16);
      continue;
    }
    if (rc != nvml::kSuccess) return rc;
    all.resize(n);
    break;
  }
  std::vector<Info> kept;
  for (const auto& info : all)
    if (ours(*g.usage, info.pid)) kept.push_back(info);
  const unsigned int capacity = *count;
  *count = static_cast<unsigned int>(kept.size());
  if (kept.size() > capacity || (!infos && !kept.empty())) return nvml::kErrorInsufficientSize;
  if (infos && !kept.empty()) std::memcpy(infos, kept.data(), kept.size() * sizeof(Info));
  return nvml::kSuccess;
}

}  // namespace
}  // namespace cushare::shim

using namespace cushare::shim;

extern "C" nvml::Return nvmlDeviceGetMemoryInfo(nvml::Device device, nvml::Memory* memory) {
  CUSHARE_REAL_OR_NOT_FOUND(n, nvmlDeviceGetMemoryInfo)
  const nvml::Return rc = n.nvmlDeviceGetMemoryInfo(device, memory);
  if (rc != nvml::kSuccess || !memory) return rc;
  const GpuView g = view_of(device);
  if (g.failed) {
    *memory = {};  // not the physical figures either
    return nvml::kErrorUnknown;
  }
  if (!g.limits) return rc;
  const MemoryView v = quota_view(g, memory->total, memory->free);
  memory->total = v.total;
  memory->free = v.free;
  memory->used = v.used;
  return rc;
}

extern "C" nvml::Return nvmlDeviceGetMemoryInfo_v2(nvml::Device device, nvml::MemoryV2* memory) {
  CUSHARE_REAL_OR_NOT_FOUND(n, nvmlDeviceGetMemoryInfo_v2)
  const nvml::Return rc = n.nvmlDeviceGetMemoryInfo_v2(device, memory);
  if (rc != nvml::kSuccess || !memory) return rc;
  const GpuView g = view_of(device);
  if (g.failed) {
    memory->total = memory->reserved = memory->free = memory->used = 0;
    return nvml::kErrorUnknown;
  }
  if (!g.limits) return rc;
  const MemoryView v = quota_view(g, memory->total, memory->free);
  memory->total = v.total;
  memory->free = v.free;
  memory->reserved = 0;  // inside the quota view, driver reservations are part of `used`
  memory->used = v.used;
  return rc;
}

extern "C" nvml::Return nvmlDeviceGetComputeRunningProcesses(nvml::Device device,
                                                             unsigned int* infoCount,
                                                             nvml::ProcessInfoV1* infos) {
  CUSHARE_REAL_OR_NOT_FOUND(n, nvmlDeviceGetComputeRunningProcesses)
  return filtered_processes(device, infoCount, infos, n.nvmlDeviceGetComputeRunningProcesses);
}

extern "C" nvml::Return nvmlDeviceGetComputeRunningProcesses_v2(nvml::Device device,
                                                                unsigned int* infoCount,
                                                                nvml::ProcessInfo* infos) {
  CUSHARE_REAL_OR_NOT_FOUND(n, nvmlDeviceGetComputeRunningProcesses_v2)
  return filtered_processes(device, infoCount, infos, n.nvmlDeviceGetComputeRunningProcesses_v2);
}

extern "C" nvml::Return nvmlDeviceGetComputeRunningProcesses_v3(nvml::Device device,
                                                                unsigned int* infoCount,
                                                                nvml::ProcessInfo* infos) {
  CUSHARE_REAL_OR_NOT_FOUND(n, nvmlDeviceGetComputeRunningProcesses_v3)
  return filtered_processes(device, infoCount, infos, n.nvmlDeviceGetComputeRunningProcesses_v3);
}
