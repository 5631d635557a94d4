// GetPreferredAllocation's choice, as pure code. The kubelet treats the answer
// as a hint (it intersects it with the candidates and fills any gap itself).
//
// - A request that fits on one GPU goes onto one GPU: best fit (the GPU with
//   the fewest free units that still fits, so large holes stay free) or, with
//   the spread policy, the GPU with the most free units.
// - A request that fits on no single GPU follows the gpuSpanning rule: with
//   `none` nothing more is proposed; with `whole` a multiple of a GPU's units
//   takes whole free GPUs (one NUMA node when possible) and anything else
//   nothing more; with `any` whole free GPUs first, then the remainder by
//   best fit, preferring that NUMA node. Allocate refuses what the rule does
//   not allow, so a hint that cannot be met there is not worth giving.
// - IDs in must_include are always kept, and the rest is taken from their GPUs
//   first (with `none`, only from their GPU). Unknown or malformed IDs are ignored (the kubelet
//   decides anyway).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "plugin/core/gpu_inventory.hpp"
#include "plugin/core/plugin_config.hpp"

namespace cushare::plugin {

std::vector<std::string> prefer_allocation(const Inventory& inventory,
                                           std::span<const std::string> available,
                                           std::span<const std::string> must_include,
                                           std::size_t size, PackingPolicy policy,
                                           GpuSpanning spanning, unsigned units_per_gpu);

}  // namespace cushare::plugin
