// The node every golden test renders: two GPUs, three readable allocations
// (one with a quota and a capped share, one unlimited burst, one for "*"
// without a usage region yet) and one allocation of a future layout version.
#pragma once

#include <filesystem>
#include <vector>

#include "node/status_model.hpp"

namespace cushare::tools::testing {

inline constexpr std::uint64_t kNowMono = 5'000'000'000'000ull;          // 5000 s after boot
inline constexpr std::uint64_t kNowUnix = 1'795'000'000'000'000'000ull;  // 2026-11-18T...
inline constexpr char kUuid0[] = "GPU-8f0c1a4e-2b3d-4c5e-9f60-718293a4b5c6";
inline constexpr char kUuid1[] = "GPU-11111111-2222-3333-4444-555555555555";

inline Now fixed_now() {
  return Now{kNowMono, kNowUnix};
}

std::vector<GpuInfo> scenario_gpus();

// Writes the node into `run_dir` (creates alloc/...).
void write_scenario_node(const std::filesystem::path& run_dir, bool daemon_heartbeat = true);

}  // namespace cushare::tools::testing
