#include "shim/context_overhead.hpp"

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

bool device_free_memory(const AllocationState& /*st*/, CUdevice ordinal,
                        std::uint64_t& free) noexcept {
  if (!nvml_ready()) return false;
  CUuuid uuid{};
  if (real().cuDeviceGetUuid_v2(&uuid, ordinal) != CUDA_SUCCESS) return false;
  const std::string text = format_gpu_uuid(uuid);
  const RealNvml& n = real_nvml();
  nvml::Device dev = nullptr;
  if (n.nvmlDeviceGetHandleByUUID(text.c_str(), &dev) != nvml::kSuccess) return false;
  nvml::Memory mem{};
  if (n.nvmlDeviceGetMemoryInfo(dev, &mem) != nvml::kSuccess) return false;
  free = mem.free;
  return true;
}

void context_created(const AllocationState& st, CUcontext ctx, CUdevice ordinal, bool measured,
                     std::uint64_t before, std::uint64_t after) noexcept {
  const unsigned gpu = gpu_index_of_device(st, ordinal);
  if (gpu >= shm::kMaxGpus) return;
  if (!measured) {
    static bool warned = false;
    if (!warned) {
      warned = true;
      log().warn(
          "NVML is not available: context overhead is not charged to the quota until the "
          "daemon measures it");
    }
    return;
  }
  const std::uint64_t overhead = before > after ? before - after : 0;
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
