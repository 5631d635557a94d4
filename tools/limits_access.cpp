#include "tools/limits_access.hpp"

#include <atomic>
#include <thread>

namespace cushare::tools {

LimitsSnapshot read_limits_snapshot(const shm::LimitsRegion& limits) {
  LimitsSnapshot snap;
  constexpr int kMaxTries = 10'000;
  for (int attempt = 0; attempt < kMaxTries; ++attempt) {
    const std::uint64_t before = limits.generation.load(std::memory_order_acquire);
    if ((before & 1u) != 0 && attempt + 1 < kMaxTries) {
      std::this_thread::yield();
      continue;
    }
    snap.gpu_count = std::min(limits.gpu_count.load(std::memory_order_relaxed), shm::kMaxGpus);
    for (std::uint32_t i = 0; i < snap.gpu_count; ++i) {
      const shm::GpuLimits& g = limits.gpus[i];
      snap.gpus[i] = GpuLimitsValues{g.memory_limit_bytes.load(std::memory_order_relaxed),
                                     g.compute_limit_pct.load(std::memory_order_relaxed),
                                     g.weight.load(std::memory_order_relaxed),
                                     g.mode.load(std::memory_order_relaxed)};
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    snap.generation = limits.generation.load(std::memory_order_relaxed);
    if (snap.generation == before) break;
  }
  return snap;
}

void write_limits(shm::LimitsRegion& limits, std::uint32_t gpu_mask,
                  const GpuLimitsChange& change) {
  std::uint64_t gen = limits.generation.load(std::memory_order_relaxed);
  for (;;) {
    if ((gen & 1u) == 0 && limits.generation.compare_exchange_weak(
                               gen, gen + 1, std::memory_order_acquire, std::memory_order_relaxed))
      break;
    std::this_thread::yield();
    gen = limits.generation.load(std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_release);
  const std::uint32_t count =
      std::min(limits.gpu_count.load(std::memory_order_relaxed), shm::kMaxGpus);
  for (std::uint32_t i = 0; i < count; ++i) {
    if ((gpu_mask & (1u << i)) == 0) continue;
    shm::GpuLimits& g = limits.gpus[i];
    if (change.memory_limit_bytes)
      g.memory_limit_bytes.store(*change.memory_limit_bytes, std::memory_order_relaxed);
    if (change.compute_limit_pct)
      g.compute_limit_pct.store(*change.compute_limit_pct, std::memory_order_relaxed);
    if (change.weight) g.weight.store(*change.weight, std::memory_order_relaxed);
    if (change.mode) g.mode.store(*change.mode, std::memory_order_relaxed);
  }
  limits.generation.store(gen + 2, std::memory_order_release);
}

}  // namespace cushare::tools
