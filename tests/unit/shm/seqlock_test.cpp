// The limits seqlock: no torn reads under a concurrent writer, takeover of a
// dead writer's odd generation, GPU lookup by UUID.
#include "shm/limits_seqlock.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace cushare::shm {
namespace {

// Fields derived from one counter so a reader can tell a torn snapshot.
GpuLimitsSnapshot value_for(std::uint64_t k) {
  GpuLimitsSnapshot s;
  s.memory_limit_bytes = k * 4096 + 7;
  s.compute_limit_pct = static_cast<std::uint32_t>(k % 100 + 1);
  s.weight = static_cast<std::uint32_t>((k % 100 + 1) * 3 + k % 7);
  s.mode = (k % 2) ? ComputeMode::kCapped : ComputeMode::kBurst;
  return s;
}

bool consistent_with_some_k(const GpuLimitsSnapshot& s) {
  if (s.memory_limit_bytes < 7 || (s.memory_limit_bytes - 7) % 4096 != 0) return false;
  const std::uint64_t k = (s.memory_limit_bytes - 7) / 4096;
  const auto want = value_for(k);
  return s.compute_limit_pct == want.compute_limit_pct && s.weight == want.weight &&
         s.mode == want.mode;
}

TEST(ShmSeqlock, ReadersNeverSeeTornValues) {
  auto region = std::make_unique<LimitsRegion>();
  init_gpu_entry(*region, 0, "GPU-0", value_for(0));
  constexpr std::uint64_t kWrites = 200000;
  std::atomic<bool> done{false};
  // torn: a snapshot claimed consistent but mixes updates (must never happen);
  // fallbacks: the bounded wait on a preempted writer ran out (allowed, and
  // flagged with consistent = false).
  std::atomic<std::uint64_t> torn{0}, reads{0}, backwards{0}, fallbacks{0};
  std::vector<std::thread> readers;
  readers.reserve(2);
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      std::uint64_t last_gen = 0;
      while (!done.load(std::memory_order_relaxed)) {
        const auto s = read_gpu_limits(*region, 0);
        if (!s.consistent) {
          fallbacks.fetch_add(1);
        } else {
          if (!consistent_with_some_k(s)) torn.fetch_add(1);
          if (s.generation < last_gen || (s.generation & 1)) backwards.fetch_add(1);
          last_gen = s.generation;
        }
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  // Write at least kWrites times, and on until the readers have overlapped
  // with the writer for a good while (they may start late on a busy machine).
  std::uint64_t gen = 0, k = 0;
  while (k < kWrites || reads.load(std::memory_order_relaxed) < 20000)
    gen = update_gpu_limits(*region, 0, value_for(++k));
  done.store(true);
  for (auto& r : readers) r.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_EQ(backwards.load(), 0u);
  EXPECT_GT(reads.load(), fallbacks.load());
  EXPECT_EQ(gen, 2 * k);
  const auto last = read_gpu_limits(*region, 0);
  EXPECT_EQ(last.memory_limit_bytes, value_for(k).memory_limit_bytes);
  EXPECT_EQ(last.generation, gen);
}

TEST(ShmSeqlock, TwoWritersSerialise) {
  auto region = std::make_unique<LimitsRegion>();
  std::atomic<std::uint64_t> torn{0};
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const auto s = read_gpu_limits(*region, 1);
      if (s.consistent && s.memory_limit_bytes != 0 && !consistent_with_some_k(s))
        torn.fetch_add(1);
    }
  });
  auto writer = [&](std::uint64_t base) {
    for (std::uint64_t k = 0; k < 50000; ++k) update_gpu_limits(*region, 1, value_for(base + k));
  };
  std::thread w1(writer, 1), w2(writer, 1000000);
  w1.join();
  w2.join();
  done.store(true);
  reader.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_EQ(region->generation.load(), 2u * 100000);
}

TEST(ShmSeqlock, DeadWriterIsTakenOver) {
  auto region = std::make_unique<LimitsRegion>();
  init_gpu_entry(*region, 0, "GPU-0", value_for(5));
  region->generation.store(7);  // a writer died between its two increments
  const auto s = read_gpu_limits(*region, 0);
  EXPECT_FALSE(s.consistent);
  EXPECT_EQ(s.memory_limit_bytes, value_for(5).memory_limit_bytes);
  const std::uint64_t g = update_gpu_limits(*region, 0, value_for(6));
  EXPECT_EQ(g % 2, 0u);
  EXPECT_GT(g, 7u);
  const auto after = read_gpu_limits(*region, 0);
  EXPECT_TRUE(after.consistent);
  EXPECT_EQ(after.memory_limit_bytes, value_for(6).memory_limit_bytes);
}

TEST(ShmSeqlock, FindGpuEntryByUuidOrWildcard) {
  auto region = std::make_unique<LimitsRegion>();
  EXPECT_FALSE(find_gpu_entry(*region, "GPU-a").has_value());
  init_gpu_entry(*region, 0, "GPU-a", {});
  init_gpu_entry(*region, 1, kAnyGpu, {});
  init_gpu_entry(*region, 2, "GPU-c", {});
  EXPECT_EQ(region->gpu_count.load(), 3u);
  EXPECT_EQ(find_gpu_entry(*region, "GPU-a"), 0u);
  EXPECT_EQ(find_gpu_entry(*region, "GPU-c"), 2u);
  EXPECT_EQ(find_gpu_entry(*region, "GPU-zzz"), 1u);
  EXPECT_EQ(find_gpu_entry(*region, ""), 1u);
  EXPECT_EQ(find_gpu_entry(*region, "GPU-"), 1u);
  // A corrupt gpu_count is clamped, never read past the array.
  region->gpu_count.store(1000);
  EXPECT_EQ(find_gpu_entry(*region, "GPU-c"), 2u);
  // An over-long UUID is truncated, still NUL-terminated.
  init_gpu_entry(*region, 3, std::string(100, 'x'), {});
  EXPECT_EQ(std::string(region->gpus[3].uuid).size(), kUuidBytes - 1);
}

}  // namespace
}  // namespace cushare::shm
