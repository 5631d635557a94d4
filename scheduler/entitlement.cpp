#include "scheduler/entitlement.hpp"

#include <algorithm>
#include <cmath>

namespace cushare::sched {

std::vector<std::uint32_t> entitlements_ppm(const std::vector<TenantPolicy>& busy) {
  const std::size_t n = busy.size();
  std::vector<double> share(n, 0.0);
  std::vector<bool> frozen(n, false);
  double left = 1.0;
  // Each round hands out what is left by weight among the unfrozen tenants;
  // a capped tenant that would exceed its limit is frozen at the limit and
  // the round is repeated. At most n rounds.
  for (std::size_t round = 0; round <= n && left > 1e-12; ++round) {
    double weights = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!frozen[i]) weights += std::max<std::uint32_t>(busy[i].weight, 1);
    }
    if (weights == 0) break;
    // Offers at this round's water level; freezing only ever raises the
    // level for the others, so everyone over its cap now stays over it.
    const double level = left / weights;
    bool froze_one = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (frozen[i] || busy[i].mode != Mode::kCapped) continue;
      const double cap = std::clamp(busy[i].limit_pct, 1u, 100u) / 100.0;
      if (share[i] + level * std::max<std::uint32_t>(busy[i].weight, 1) >= cap) {
        frozen[i] = true;
        froze_one = true;
      }
    }
    if (froze_one) {
      left = 1.0;
      for (std::size_t i = 0; i < n; ++i) {
        if (frozen[i]) {
          share[i] = std::clamp(busy[i].limit_pct, 1u, 100u) / 100.0;
          left -= share[i];
        }
      }
      if (left < 0) left = 0;
      continue;
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!frozen[i]) share[i] += left * std::max<std::uint32_t>(busy[i].weight, 1) / weights;
    }
    left = 0;
  }
  std::vector<std::uint32_t> ppm(n);
  for (std::size_t i = 0; i < n; ++i) {
    ppm[i] = static_cast<std::uint32_t>(std::lround(std::clamp(share[i], 0.0, 1.0) * 1e6));
  }
  return ppm;
}

}  // namespace cushare::sched
