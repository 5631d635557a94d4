// Consistent reads and writes of an allocation's quota fields under the
// LimitsRegion::generation seqlock (odd = a writer is mid-update).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "shm/layout.hpp"

namespace cushare::tools {

// Region flag for allocations made by `cusharectl create` (next free bit of
// shm::RegionFlags; asked the lead to add it to shm/layout.hpp).
inline constexpr std::uint32_t kCreatedByCtl = 1u << 3;

struct GpuLimitsValues {
  std::uint64_t memory_limit_bytes = shm::kUnlimited;
  std::uint32_t compute_limit_pct = 100;
  std::uint32_t weight = 100;
  std::uint32_t mode = 0;
};

struct LimitsSnapshot {
  std::uint64_t generation = 0;
  std::uint32_t gpu_count = 0;
  std::array<GpuLimitsValues, shm::kMaxGpus> gpus{};
};

// Retries while a writer is active; a writer that died mid-update (generation
// stuck odd) cannot block a reader forever: after a bounded number of tries
// the last values read are returned.
LimitsSnapshot read_limits_snapshot(const shm::LimitsRegion& limits);

// Fields of one GPU entry to change; unset = keep.
struct GpuLimitsChange {
  std::optional<std::uint64_t> memory_limit_bytes;
  std::optional<std::uint32_t> compute_limit_pct;
  std::optional<std::uint32_t> weight;
  std::optional<std::uint32_t> mode;
};

// Applies `change` to the entries selected by `gpu_mask` (bit i = gpus[i]) as
// one seqlock write. Single writer per region (the daemon) is assumed; a
// concurrent second writer is detected by CAS and waited for.
void write_limits(shm::LimitsRegion& limits, std::uint32_t gpu_mask, const GpuLimitsChange& change);

}  // namespace cushare::tools
