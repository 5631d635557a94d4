#pragma once
// What one multiprocessor of a compute capability holds, as the CUDA
// programming guide's per-capability table and the occupancy calculator
// (cuda_occupancy.h) give them. cuDeviceGetAttribute reports these, and the
// occupancy and per-function launch limits are computed from them, so the
// three always agree.
#include <cstdint>

namespace fakegpu {

struct SmLimits {
  int warp_size = 32;
  int max_threads_per_block = 1024;
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int regs_per_sm = 65536;
  int regs_per_block = 65536;
  int max_regs_per_thread = 255;
  int reg_granularity = 256;  // registers are given to warps in units of this
  int sub_partitions = 4;     // a warp's registers come from one of these quarters
  uint64_t smem_per_sm = 233472;
  uint64_t smem_per_block = 49152;  // without opting in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_...)
  uint64_t smem_per_block_optin = 232448;
  uint64_t smem_reserved_per_block = 1024;  // taken by the driver from every block (sm_80 on)
  uint64_t smem_granularity = 128;
};

// The limits of compute capability major.minor; an unknown minor takes its
// major's first, an unknown major those of 9.0.
const SmLimits& sm_limits(int major, int minor);

}  // namespace fakegpu
