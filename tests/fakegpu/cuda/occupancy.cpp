#include "tests/fakegpu/cuda/occupancy.hpp"

#include <algorithm>
#include <climits>

namespace fakegpu {

namespace {

uint64_t round_up(uint64_t v, uint64_t unit) {
  return (v + unit - 1) / unit * unit;
}

int div_up(int v, int unit) {
  return (v + unit - 1) / unit;
}

int regs_per_warp(const SmLimits& sm, int regs) {
  return static_cast<int>(
      round_up(uint64_t(regs) * uint64_t(sm.warp_size), uint64_t(sm.reg_granularity)));
}

// The hardware checks a block's registers as if its warps were spread over all
// sub-partitions (rounded up to a multiple of them); the software check counts
// the warps themselves.
bool block_registers_fit(const SmLimits& sm, int regs, int warps) {
  const int per_warp = regs_per_warp(sm, regs);
  const int assumed_warps = div_up(warps, sm.sub_partitions) * sm.sub_partitions;
  return regs <= sm.max_regs_per_thread && int64_t{per_warp} * assumed_warps <= sm.regs_per_block;
}

int limit_by_registers(const SmLimits& sm, int regs, int warps) {
  if (!block_registers_fit(sm, regs, warps)) return 0;
  const int per_warp = regs_per_warp(sm, regs);
  if (per_warp == 0) return INT_MAX;
  const int warps_per_partition = sm.regs_per_sm / sm.sub_partitions / per_warp;
  return warps_per_partition * sm.sub_partitions / warps;
}

int limit_by_shared_memory(const SmLimits& sm, const FunctionLimits& f, uint64_t dynamic_smem) {
  if (dynamic_smem > f.max_dynamic_smem) return 0;
  const uint64_t fixed = f.static_smem + sm.smem_reserved_per_block;
  const uint64_t per_block = round_up(fixed + dynamic_smem, sm.smem_granularity);
  // A function whose permitted dynamic size passes the default per-block
  // limit has opted in to the larger one.
  const uint64_t limit = (fixed + f.max_dynamic_smem > sm.smem_per_block ? sm.smem_per_block_optin
                                                                         : sm.smem_per_block) +
                         sm.smem_reserved_per_block;
  if (per_block > limit) return 0;
  return per_block == 0 ? INT_MAX : static_cast<int>(sm.smem_per_sm / per_block);
}

}  // namespace

int max_threads_per_block(const SmLimits& sm, int regs, int own_bound) {
  int threads = sm.max_threads_per_block;
  if (own_bound > 0) threads = std::min(threads, own_bound);
  // The most warps whose registers pass the per-block check, in whole sub-partition steps.
  int warps = div_up(threads, sm.warp_size);
  while (warps > 0 && !block_registers_fit(sm, regs, warps)) --warps;
  return std::min(threads, warps * sm.warp_size);
}

uint64_t default_max_dynamic_smem(const SmLimits& sm, uint64_t static_smem) {
  return sm.smem_per_block > static_smem ? sm.smem_per_block - static_smem : 0;
}

int max_active_blocks(const SmLimits& sm, const FunctionLimits& f, int block_size,
                      uint64_t dynamic_smem) {
  if (block_size <= 0 || block_size > max_threads_per_block(sm, f.regs, f.max_threads)) return 0;
  const int warps = div_up(block_size, sm.warp_size);
  const int by_warps = sm.max_threads_per_sm / sm.warp_size / warps;
  return std::min({by_warps, sm.max_blocks_per_sm, limit_by_registers(sm, f.regs, warps),
                   limit_by_shared_memory(sm, f, dynamic_smem)});
}

BlockSizeChoice best_block_size(const SmLimits& sm, const FunctionLimits& f,
                                const std::function<uint64_t(int)>& dynamic_smem, int limit) {
  int largest = max_threads_per_block(sm, f.regs, f.max_threads);
  if (limit > 0) largest = std::min(largest, limit);
  BlockSizeChoice best;
  int best_threads = 0;
  for (int aligned = div_up(largest, sm.warp_size) * sm.warp_size; aligned > 0;
       aligned -= sm.warp_size) {
    const int block = std::min(largest, aligned);
    const int blocks = max_active_blocks(sm, f, block, dynamic_smem(block));
    if (block * blocks > best_threads) {
      best = {block, blocks};
      best_threads = block * blocks;
    }
    if (best_threads == sm.max_threads_per_sm) break;
  }
  return best;
}

}  // namespace fakegpu
