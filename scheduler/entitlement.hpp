// Entitlement of each tenant of one GPU: the share of GPU time it should get
// while the given set of tenants is busy. Weighted max-min fair sharing
// (water-filling): shares follow the weights, a `capped` tenant never gets
// more than its limit, and what a capped tenant cannot take goes to the others
// in proportion to their weights; if only capped tenants remain, the rest of
// the GPU stays idle.
#pragma once

#include <cstdint>
#include <vector>

namespace cushare::sched {

enum class Mode : std::uint32_t { kBurst = 0, kCapped = 1 };  // = shm::ComputeMode values

struct TenantPolicy {
  std::uint32_t weight = 100;     // >= 1
  std::uint32_t limit_pct = 100;  // 1..100, a hard cap only in capped mode
  Mode mode = Mode::kBurst;
};

// Returns the entitlement of each policy (same order), in parts per million.
std::vector<std::uint32_t> entitlements_ppm(const std::vector<TenantPolicy>& busy);

}  // namespace cushare::sched
