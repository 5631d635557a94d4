#include "shim/context_overhead.hpp"

#include <unistd.h>

#include <mutex>
#include <new>
#include <vector>

#include "shim/device_uuid.hpp"
#include "shim/logging.hpp"
#include "shim/real_driver.hpp"
#include "shm/quota_ledger.hpp"

namespace cushare::shim {
namespace {

struct ContextRecord {
  CUcontext ctx;  // nullptr: a primary context
  CUdevice ordinal;
  unsigned gpu;
  std::uint64_t overhead;
};

// Context creation is rare and slow in the driver; a mutex is fine here.
std::mutex& records_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<ContextRecord>& records() {
  static auto* v = new std::vector<ContextRecord>;
  return *v;
}

bool nvml_ready() noexcept {
  static const bool ready = [] {
    const RealNvml& n = real_nvml();
    return n.library_loaded && n.nvmlInit_v2 && n.nvmlDeviceGetHandleByUUID &&
           n.nvmlDeviceGetMemoryInfo && n.nvmlInit_v2() == nvml::kSuccess;
  }();
  return ready;
}

}  // namespace

MemorySample sample_memory(CUdevice ordinal) noexcept {
  MemorySample s;
  if (!nvml_ready()) return s;
  CUuuid uuid{};
  if (real().cuDeviceGetUuid_v2(&uuid, ordinal) != CUDA_SUCCESS) return s;
  const std::string text = format_gpu_uuid(uuid);
  const RealNvml& n = real_nvml();
  nvml::Device dev = nullptr;
  if (n.nvmlDeviceGetHandleByUUID(text.c_str(), &dev) != nvml::kSuccess) return s;
  s.nvml = true;
  nvml::Memory mem{};
  if (n.nvmlDeviceGetMemoryInfo(dev, &mem) == nvml::kSuccess) {
    s.device_known = true;
    s.device_free = mem.free;
  }
  if (n.nvmlDeviceGetComputeRunningProcesses_v3) {
    nvml::ProcessInfo infos[64];
    unsigned int count = 64;
    if (n.nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos) == nvml::kSuccess) {
      const auto self = static_cast<unsigned>(getpid());
      for (unsigned i = 0; i < count && i < 64; ++i) {
        if (infos[i].pid == self) {
          s.process_known = true;
          s.process_used = infos[i].usedGpuMemory;
        }
      }
    }
  }
  return s;
}

bool estimate_overhead(const MemorySample& before, const MemorySample& after,
                       std::uint64_t& overhead) noexcept {
  if (after.process_known) {
    // Not listed before: no context of ours on the device yet.
    const std::uint64_t base = before.process_known ? before.process_used : 0;
    overhead = after.process_used > base ? after.process_used - base : 0;
    return true;
  }
  if (before.device_known && after.device_known) {
    overhead = before.device_free > after.device_free ? before.device_free - after.device_free : 0;
    return true;
  }
  return false;
}

bool context_fits(const AllocationState& st, CUdevice ordinal) noexcept {
  const unsigned gpu = gpu_index_of_device(st, ordinal);
  if (gpu >= shm::kMaxGpus) return true;  // allocations there are refused anyway
  const std::uint64_t limit = memory_limit(st, gpu);
  const std::uint64_t used = shm::QuotaLedger(*st.usage).used(gpu);
  if (limit == shm::kUnlimited || used < limit) return true;
  log().error(
      "context creation on device {} refused: allocation '{}' ({}) is at its memory "
      "quota ({} of {} bytes used) and a context needs device memory too",
      ordinal, st.limits->header.alloc_id, st.run_dir, used, limit);
  return false;
}

void context_created(const AllocationState& st, CUcontext ctx, CUdevice ordinal,
                     const MemorySample& before, const MemorySample& after) noexcept {
  const unsigned gpu = gpu_index_of_device(st, ordinal);
  if (gpu >= shm::kMaxGpus) return;
  std::uint64_t overhead = 0;
  if (!estimate_overhead(before, after, overhead)) {
    static bool warned = false;
    if (!warned) {
      warned = true;
      log().warn(
          "NVML is not available: context overhead is not charged to the quota until the "
          "daemon measures it");
    }
    return;
  }
  std::lock_guard lock(records_mutex());
  shm::QuotaLedger(*st.usage).charge_overhead(gpu, *st.slot, overhead);
  records().push_back({ctx, ordinal, gpu, overhead});
  log().debug("context on device {} charged {} bytes of overhead", ordinal, overhead);
}

void context_destroyed(const AllocationState& st, CUcontext ctx, CUdevice ordinal) noexcept {
  std::lock_guard lock(records_mutex());
  auto& v = records();
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it->ctx != ctx || (!ctx && it->ordinal != ordinal)) continue;
    const unsigned gpu = it->gpu;
    const std::uint64_t cur = st.slot->overhead[gpu].load(std::memory_order_acquire);
    shm::QuotaLedger(*st.usage).set_overhead(gpu, *st.slot,
                                             cur > it->overhead ? cur - it->overhead : 0);
    v.erase(it);
    return;
  }
}

void context_reset_after_fork() noexcept {
  // The child never holds the parent's lock's owner; start clean.
  new (&records_mutex()) std::mutex;
  records().clear();
}

}  // namespace cushare::shim
