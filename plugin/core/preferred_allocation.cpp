#include "plugin/core/preferred_allocation.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "plugin/core/device_id.hpp"

namespace cushare::plugin {
namespace {

struct Candidate {
  std::size_t pos = 0;  // inventory position
  int numa = kUnknownNumaNode;
  std::vector<std::string> free_ids;  // available and not yet chosen, by unit
};

}  // namespace

std::vector<std::string> prefer_allocation(const Inventory& inventory,
                                           std::span<const std::string> available,
                                           std::span<const std::string> must_include,
                                           std::size_t size, PackingPolicy policy,
                                           GpuSpanning spanning, unsigned units_per_gpu) {
  std::vector<std::string> chosen;
  std::set<std::string> taken;
  std::set<std::size_t> must_gpus;
  for (const auto& id : must_include) {
    if (chosen.size() >= size) break;
    if (!taken.insert(id).second) continue;
    chosen.push_back(id);
    try {
      if (const GpuInfo* g = inventory.find(parse_device_id(id).gpu_uuid)) {
        must_gpus.insert(static_cast<std::size_t>(g - inventory.gpus.data()));
      }
    } catch (const DeviceIdError&) {
    }
  }
  if (chosen.size() >= size) return chosen;

  std::map<std::size_t, Candidate> by_gpu;
  std::map<std::string, unsigned> unit_of;
  for (const auto& id : available) {
    if (taken.contains(id)) continue;
    DeviceId parsed;
    try {
      parsed = parse_device_id(id);
    } catch (const DeviceIdError&) {
      continue;
    }
    const GpuInfo* g = inventory.find(parsed.gpu_uuid);
    if (g == nullptr || parsed.unit >= units_per_gpu) continue;
    const auto pos = static_cast<std::size_t>(g - inventory.gpus.data());
    auto& c = by_gpu[pos];
    c.pos = pos;
    c.numa = g->numa_node;
    if (std::find(c.free_ids.begin(), c.free_ids.end(), id) == c.free_ids.end()) {
      c.free_ids.push_back(id);
      unit_of[id] = parsed.unit;
    }
  }
  for (auto& [pos, c] : by_gpu) {
    std::sort(c.free_ids.begin(), c.free_ids.end(),
              [&](const std::string& a, const std::string& b) { return unit_of[a] < unit_of[b]; });
  }

  auto take = [&](Candidate& c, std::size_t n) {
    n = std::min(n, c.free_ids.size());
    for (std::size_t i = 0; i < n; ++i) {
      chosen.push_back(c.free_ids[i]);
      taken.insert(c.free_ids[i]);
    }
    c.free_ids.erase(c.free_ids.begin(), c.free_ids.begin() + static_cast<std::ptrdiff_t>(n));
  };
  auto need = [&] { return size - chosen.size(); };

  // 1. Continue on the GPUs the kubelet already committed to.
  for (const auto pos : must_gpus) {
    if (need() == 0) break;
    if (auto it = by_gpu.find(pos); it != by_gpu.end()) take(it->second, need());
  }
  if (need() == 0) return chosen;
  if (spanning == GpuSpanning::kNone && !must_gpus.empty()) return chosen;

  // 2. Fits on one GPU: best fit or spread.
  Candidate* single = nullptr;
  for (auto& [pos, c] : by_gpu) {
    if (c.free_ids.size() < need()) continue;
    const bool better = single == nullptr || (policy == PackingPolicy::kSpread
                                                  ? c.free_ids.size() > single->free_ids.size()
                                                  : c.free_ids.size() < single->free_ids.size());
    if (better) single = &c;
  }
  if (single != nullptr) {
    take(*single, need());
    return chosen;
  }

  if (spanning == GpuSpanning::kNone) return chosen;
  if (spanning == GpuSpanning::kWhole && need() % units_per_gpu != 0) return chosen;

  // 3. Larger than any one GPU: whole free GPUs, on the NUMA node with the most.
  std::map<int, std::vector<Candidate*>> whole_by_numa;
  for (auto& [pos, c] : by_gpu) {
    if (c.free_ids.size() == units_per_gpu) whole_by_numa[c.numa].push_back(&c);
  }
  int best_numa = kUnknownNumaNode;
  std::size_t best_count = 0;
  for (const auto& [numa, gpus] : whole_by_numa) {
    if (gpus.size() > best_count) {
      best_numa = numa;
      best_count = gpus.size();
    }
  }
  if (best_count > 0) {
    for (Candidate* c : whole_by_numa[best_numa]) {
      if (need() < units_per_gpu) break;
      take(*c, units_per_gpu);
    }
  }
  // Further whole GPUs from other nodes if that node had too few.
  for (auto& [numa, gpus] : whole_by_numa) {
    for (Candidate* c : gpus) {
      if (need() < units_per_gpu) break;
      if (c->free_ids.size() == units_per_gpu) take(*c, units_per_gpu);
    }
  }
  // 4. The remainder: best fit, same NUMA node first; then the largest holes.
  while (spanning == GpuSpanning::kAny && need() > 0) {
    Candidate* pick = nullptr;
    auto better = [&](const Candidate& a, const Candidate* b) {
      if (b == nullptr) return true;
      const bool a_fits = a.free_ids.size() >= need(), b_fits = b->free_ids.size() >= need();
      if (a_fits != b_fits) return a_fits;
      const bool a_near = a.numa == best_numa, b_near = b->numa == best_numa;
      if (a_near != b_near) return a_near;
      return a_fits ? a.free_ids.size() < b->free_ids.size()
                    : a.free_ids.size() > b->free_ids.size();
    };
    for (auto& [pos, c] : by_gpu) {
      if (!c.free_ids.empty() && better(c, pick)) pick = &c;
    }
    if (pick == nullptr) break;  // not enough: the kubelet fills the rest
    take(*pick, need());
  }
  return chosen;
}

}  // namespace cushare::plugin
