// GetPreferredAllocation's choice, as pure code. The kubelet treats the answer
// as a hint (it intersects it with the candidates and fills any gap itself).
//
// - A request that fits on one GPU goes onto one GPU: best fit (the GPU with
//   the fewest free units that still fits, so large holes stay free) or, with
//   the spread policy, the GPU with the most free units.
// - A larger request takes whole free GPUs first, all on one NUMA node when
//   possible, then the remainder by best fit, preferring that NUMA node.
// - IDs in must_include are always kept, and the rest is taken from their GPUs
//   first. Unknown or malformed IDs are ignored (the kubelet decides anyway).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "deploy/device-plugin/gpu_inventory.hpp"
#include "deploy/device-plugin/plugin_config.hpp"

namespace cushare::plugin {

std::vector<std::string> PreferAllocation(const Inventory& inventory,
                                          std::span<const std::string> available,
                                          std::span<const std::string> must_include,
                                          std::size_t size, PackingPolicy policy,
                                          unsigned units_per_gpu);

}  // namespace cushare::plugin
