// The occupancy arithmetic against worked examples of NVIDIA's occupancy
// rules (CUDA C++ Best Practices Guide, "Calculating Occupancy", and the
// calculator's per-capability limits), without a driver.
#include <gtest/gtest.h>

#include "tests/fakegpu/cuda/occupancy.hpp"

namespace {

using fakegpu::best_block_size;
using fakegpu::FunctionLimits;
using fakegpu::max_active_blocks;
using fakegpu::max_threads_per_block;
using fakegpu::sm_limits;

FunctionLimits function(int regs, uint64_t static_smem = 0, uint64_t max_dynamic = 48 * 1024) {
  FunctionLimits f;
  f.regs = regs;
  f.static_smem = static_smem;
  f.max_dynamic_smem = max_dynamic;
  return f;
}

uint64_t no_dynamic(int) {
  return 0;
}

TEST(Occupancy, BestPracticesGuideExampleOnVolta) {
  // 37 registers: 1184 per warp, allocated as 1280; 12 warps per sub-partition, 48 per SM.
  const auto& volta = sm_limits(7, 0);
  EXPECT_EQ(max_active_blocks(volta, function(37), 128, 0), 12);  // 75 % occupancy
  EXPECT_EQ(max_active_blocks(volta, function(37), 320, 0), 4);   // 63 %
}

TEST(Occupancy, WarpsBlocksRegistersAndSharedMemoryEachLimit) {
  const auto& h100 = sm_limits(9, 0);
  EXPECT_EQ(max_active_blocks(h100, function(32), 256, 0), 8);  // 64 warps / 8
  EXPECT_EQ(max_active_blocks(h100, function(16), 32, 0), 32);  // the 32-block cap
  // 64 registers: 2048 per warp, 8 warps per sub-partition, 32 per SM.
  EXPECT_EQ(max_active_blocks(h100, function(64), 256, 0), 4);
  // 48 KiB dynamic + the 1 KiB the driver reserves = 50176 bytes; 233472 / 50176 = 4.
  EXPECT_EQ(max_active_blocks(h100, function(16), 128, 48 * 1024), 4);
  // Static and dynamic shared memory add up, in 128-byte granules: 1200 + 1024 -> 2304.
  EXPECT_EQ(max_active_blocks(h100, function(16, 1200), 32, 0), 32);
  EXPECT_EQ(max_active_blocks(h100, function(16, 1200), 32, 20000), 10);  // 22272 per block
}

TEST(Occupancy, ABlockThatCannotRunGetsNone) {
  const auto& h100 = sm_limits(9, 0);
  EXPECT_EQ(max_active_blocks(h100, function(16), 1025, 0), 0);
  EXPECT_EQ(max_active_blocks(h100, function(255), 512, 0), 0);  // 8192 registers a warp
  EXPECT_EQ(max_active_blocks(h100, function(255), 256, 0), 1);
  // More dynamic shared memory than the function may use (no opt-in).
  EXPECT_EQ(max_active_blocks(h100, function(16), 128, 48 * 1024 + 1), 0);
  // Opted in to 100 KiB: 102400 + 1024 per block, 2 per SM.
  EXPECT_EQ(max_active_blocks(h100, function(16, 0, 100 * 1024), 128, 100 * 1024), 2);
  // A bound from the kernel itself (launch bounds / .maxntid).
  FunctionLimits bounded = function(16);
  bounded.max_threads = 128;
  EXPECT_EQ(max_active_blocks(h100, bounded, 256, 0), 0);
  EXPECT_EQ(max_active_blocks(h100, bounded, 128, 0), 16);
}

TEST(Occupancy, CapabilitiesDifferInThreadsBlocksAndSharedMemory) {
  EXPECT_EQ(max_active_blocks(sm_limits(7, 5), function(32), 1024, 0), 1);  // Turing: 1024 threads
  EXPECT_EQ(max_active_blocks(sm_limits(7, 5), function(16), 64, 0), 16);
  EXPECT_EQ(max_active_blocks(sm_limits(8, 9), function(16), 64, 0), 24);
  EXPECT_EQ(max_active_blocks(sm_limits(8, 0), function(64), 1024, 0), 1);
  // A100: 164 KiB per SM; 40000 dynamic + 1024 reserved -> 41088 -> 4 blocks.
  EXPECT_EQ(max_active_blocks(sm_limits(8, 0), function(16, 0, 163 * 1024), 64, 40000), 4);
}

TEST(Occupancy, MaxThreadsPerBlockFollowsRegisters) {
  const auto& h100 = sm_limits(9, 0);
  EXPECT_EQ(max_threads_per_block(h100, 32, 0), 1024);
  EXPECT_EQ(max_threads_per_block(h100, 128, 0), 512);
  EXPECT_EQ(max_threads_per_block(h100, 255, 0), 256);
  EXPECT_EQ(max_threads_per_block(h100, 72, 0), 896);  // 2304 a warp: 28 warps
  EXPECT_EQ(max_threads_per_block(h100, 32, 200), 200);
}

TEST(Occupancy, PotentialBlockSizeKeepsTheMostThreadsResident) {
  const auto& h100 = sm_limits(9, 0);
  auto best = best_block_size(h100, function(32), no_dynamic, 0);
  EXPECT_EQ(best.block_size, 1024);
  EXPECT_EQ(best.blocks_per_sm, 2);
  // 64 registers: 1024 threads resident at most; the largest block wins ties.
  best = best_block_size(h100, function(64), no_dynamic, 0);
  EXPECT_EQ(best.block_size, 1024);
  EXPECT_EQ(best.blocks_per_sm, 1);
  // A limit that is no multiple of the warp size is tried first, then warp multiples.
  best = best_block_size(h100, function(32), no_dynamic, 100);
  EXPECT_EQ(best.block_size, 64);  // 100 -> 16 blocks (1600), 96 -> 21 (2016), 64 -> 32 (2048)
  EXPECT_EQ(best.blocks_per_sm, 32);
  // Dynamic shared memory per block size, 100 bytes a thread: no block above 491
  // threads fits the 48 KiB, 480 threads keep 4 blocks (1920 threads), and 256
  // is the largest that fills the SM: 8 blocks of 25600 + 1024 bytes.
  best = best_block_size(
      h100, function(32), [](int b) { return uint64_t(b) * 100; }, 0);
  EXPECT_EQ(best.block_size, 256);
  EXPECT_EQ(best.blocks_per_sm, 8);
}

}  // namespace
