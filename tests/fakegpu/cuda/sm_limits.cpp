#include "tests/fakegpu/cuda/sm_limits.hpp"

#include <array>

namespace fakegpu {

namespace {

struct Row {
  int major, minor;
  SmLimits limits;
};

// Threads, blocks and shared memory per SM differ between capabilities; the
// register file (64 Ki), warp size and register granularity do not.
SmLimits make(int threads_per_sm, int blocks_per_sm, uint64_t smem_per_sm_kib, uint64_t optin_kib,
              uint64_t reserved, uint64_t granularity) {
  SmLimits l;
  l.max_threads_per_sm = threads_per_sm;
  l.max_blocks_per_sm = blocks_per_sm;
  l.smem_per_sm = smem_per_sm_kib * 1024;
  l.smem_per_block_optin = optin_kib * 1024;
  l.smem_reserved_per_block = reserved;
  l.smem_granularity = granularity;
  return l;
}

const std::array<Row, 9> kRows = {{
    {7, 0, make(2048, 32, 96, 96, 0, 256)},
    {7, 5, make(1024, 16, 64, 64, 0, 256)},
    {8, 0, make(2048, 32, 164, 163, 1024, 128)},
    {8, 6, make(1536, 16, 100, 99, 1024, 128)},
    {8, 7, make(2048, 16, 164, 163, 1024, 128)},
    {8, 9, make(1536, 24, 100, 99, 1024, 128)},
    {9, 0, make(2048, 32, 228, 227, 1024, 128)},
    {10, 0, make(2048, 32, 228, 227, 1024, 128)},
    {12, 0, make(1536, 24, 100, 99, 1024, 128)},
}};

}  // namespace

const SmLimits& sm_limits(int major, int minor) {
  const Row* same_major = nullptr;
  for (const Row& r : kRows) {
    if (r.major == major && r.minor == minor) return r.limits;
    if (r.major == major && same_major == nullptr) same_major = &r;
  }
  if (same_major != nullptr) return same_major->limits;
  for (const Row& r : kRows) {
    if (r.major == 9) return r.limits;
  }
  return kRows.front().limits;
}

}  // namespace fakegpu
