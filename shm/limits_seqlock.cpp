#include "shm/limits_seqlock.hpp"

#include <algorithm>
#include <cstring>

namespace cushare::shm {

void init_gpu_entry(LimitsRegion& limits, unsigned gpu, std::string_view uuid,
                    const GpuLimitsSnapshot& value) {
  GpuLimits& g = limits.gpus[gpu];
  std::memset(g.uuid, 0, kUuidBytes);
  std::memcpy(g.uuid, uuid.data(), std::min(uuid.size(), kUuidBytes - 1));
  g.memory_limit_bytes.store(value.memory_limit_bytes, std::memory_order_relaxed);
  g.compute_limit_pct.store(value.compute_limit_pct, std::memory_order_relaxed);
  g.weight.store(value.weight, std::memory_order_relaxed);
  g.mode.store(static_cast<std::uint32_t>(value.mode), std::memory_order_relaxed);
  if (limits.gpu_count.load(std::memory_order_relaxed) < gpu + 1)
    limits.gpu_count.store(gpu + 1, std::memory_order_relaxed);
}

std::optional<unsigned> find_gpu_entry(const LimitsRegion& limits, std::string_view uuid) {
  const unsigned n = std::min(limits.gpu_count.load(std::memory_order_acquire), kMaxGpus);
  std::optional<unsigned> any;
  for (unsigned i = 0; i < n; ++i) {
    const char* u = limits.gpus[i].uuid;
    const std::string_view entry(u, strnlen(u, kUuidBytes));
    if (!uuid.empty() && entry == uuid) return i;
    if (!any && entry == kAnyGpu) any = i;
  }
  return any;
}

}  // namespace cushare::shm
