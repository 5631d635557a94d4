// Environment -> per-GPU quota spec (the variable table of docs/shim.md).
// Pure: the environment comes through an injected lookup, the GPUs through a
// list, so every precedence rule is unit-tested without touching the process
// environment. See docs/shm.md for the precedence rules.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "shm/layout.hpp"
#include "shm/parsed.hpp"

namespace cushare::shm {

// Returns the value of a variable, or nullptr when it is not set (getenv's
// contract). An empty value counts as set (and is malformed).
using EnvLookup = std::function<const char*(const char*)>;

// EnvLookup over the real process environment (getenv).
EnvLookup process_env();

struct VisibleGpu {
  unsigned index = 0;  // CUDA ordinal as the process sees it (0-based)
  std::string uuid;    // "GPU-..." as NVML / cuDeviceGetUuid report it
  std::uint64_t total_memory_bytes = 0;
};

struct GpuQuotaSpec {
  unsigned index = 0;
  std::string uuid;
  std::uint64_t memory_limit_bytes = kUnlimited;
  std::uint32_t compute_limit_pct = 100;
  std::uint32_t weight = 100;  // defaults to compute_limit_pct
  ComputeMode mode = ComputeMode::kBurst;
  // The variables that decided memory and compute ("" = default), for logs and
  // for the "environment disagrees with the region" warning.
  std::string memory_source;
  std::string compute_source;
};

// One spec per visible GPU, in the order given. Fails (naming the variable and
// its value) on any malformed variable that was consulted, even one a more
// specific variable overrides: a typo never silently means "unlimited".
// Fails when more than kMaxGpus GPUs are visible.
Parsed<std::vector<GpuQuotaSpec>> quota_spec_from_env(const EnvLookup& env,
                                                      std::span<const VisibleGpu> gpus);

// Largest accepted CUSHARE_COMPUTE_WEIGHT.
inline constexpr std::uint32_t kMaxWeight = 10000;

}  // namespace cushare::shm
