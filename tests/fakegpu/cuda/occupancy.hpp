#pragma once
// Occupancy arithmetic with the rules of NVIDIA's occupancy calculator
// (cuda_occupancy.h) for compute capability 7.0 and later: blocks per SM are
// the least of the warp, block, register and shared-memory limits, registers
// go to warps in allocation units from four sub-partitions, and shared memory
// is allocated per block in granules, including the driver's reserved part.
#include <cstdint>
#include <functional>

#include "tests/fakegpu/cuda/sm_limits.hpp"

namespace fakegpu {

struct FunctionLimits {
  int regs = 0;  // per thread
  uint64_t static_smem = 0;
  int max_threads = 0;            // the function's own bound on the block size; 0: none
  uint64_t max_dynamic_smem = 0;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
};

// The largest block the function can be launched with: the device's limit,
// the function's own bound, and as many warps as its registers allow a block
// (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK).
int max_threads_per_block(const SmLimits& sm, int regs, int own_bound);

// Dynamic shared memory a function may use by default: the per-block limit
// without opting in, less its static shared memory.
uint64_t default_max_dynamic_smem(const SmLimits& sm, uint64_t static_smem);

// Resident blocks of `block_size` threads per SM (0 when such a block cannot
// run at all: too many threads, registers or shared memory).
int max_active_blocks(const SmLimits& sm, const FunctionLimits& f, int block_size,
                      uint64_t dynamic_smem);

struct BlockSizeChoice {
  int block_size = 0;
  int blocks_per_sm = 0;
};

// The block size, from the largest permitted down in warp steps, that keeps
// the most threads resident (the largest such on ties), with the blocks per SM
// it gets. `dynamic_smem(block)` is the dynamic shared memory of a block size;
// `limit` caps the block size when non-zero.
BlockSizeChoice best_block_size(const SmLimits& sm, const FunctionLimits& f,
                                const std::function<uint64_t(int)>& dynamic_smem, int limit);

}  // namespace fakegpu
