// The memory figures a tenant sees (cuMemGetInfo, cuDeviceTotalMem, NVML):
// a GPU the size of its quota. Pure.
#pragma once

#include <algorithm>
#include <cstdint>

#include "shm/layout.hpp"

namespace cushare::shim {

struct MemoryView {
  std::uint64_t total = 0;
  std::uint64_t free = 0;
  std::uint64_t used = 0;  // total - free (what NVML calls used)
};

// total = min(quota, physical); free = clamp(quota - used, 0, real free) and
// never above total; used = total - free. Unlimited: the real figures.
inline MemoryView virtual_memory(std::uint64_t quota, std::uint64_t charged,
                                 std::uint64_t real_total, std::uint64_t real_free) {
  MemoryView v;
  if (quota == shm::kUnlimited) {
    v.total = real_total;
    v.free = std::min(real_free, real_total);
  } else {
    v.total = std::min(quota, real_total);
    const std::uint64_t headroom = quota > charged ? quota - charged : 0;
    v.free = std::min({headroom, real_free, v.total});
  }
  v.used = v.total - v.free;
  return v;
}

}  // namespace cushare::shim
