#include "shm/quota_spec.hpp"

#include <cstdlib>
#include <optional>
#include <string_view>

#include "shm/quantity.hpp"

namespace cushare::shm {
namespace {

struct Candidate {
  std::string name;
  const char* value;  // nullptr = not set
};

// Variable names for one setting, most specific first. The UUID form is
// looked up verbatim and with '-' spelled '_' (shells cannot export names
// containing '-').
std::vector<std::string> specific_names(const std::string& base, const VisibleGpu& gpu) {
  std::vector<std::string> names;
  if (!gpu.uuid.empty()) {
    names.push_back(base + "_" + gpu.uuid);
    std::string underscored = gpu.uuid;
    for (char& c : underscored)
      if (c == '-') c = '_';
    if (underscored != gpu.uuid) names.push_back(base + "_" + underscored);
  }
  names.push_back(base + "_" + std::to_string(gpu.index));
  names.push_back(base);
  return names;
}

std::string describe(const Candidate& c, const std::string& why) {
  return c.name + "='" + c.value + "': " + why;
}

std::vector<Candidate> lookup_all(const EnvLookup& env, const std::vector<std::string>& names) {
  std::vector<Candidate> out;
  out.reserve(names.size());
  for (const auto& n : names) out.push_back({n, env(n.c_str())});
  return out;
}

std::optional<std::string> memory_for(const EnvLookup& env, const VisibleGpu& gpu,
                                      GpuQuotaSpec& spec) {
  auto cushare = lookup_all(env, specific_names("CUSHARE_MEMORY_LIMIT", gpu));
  // HAMi has no per-UUID form: index then global.
  auto hami = lookup_all(
      env, {"CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(gpu.index), "CUDA_DEVICE_MEMORY_LIMIT"});
  bool decided = false;
  for (const auto& c : cushare) {
    if (c.value == nullptr) continue;
    auto amount = parse_memory_amount(c.value);
    if (!amount) return describe(c, amount.error());
    if (amount->kind == MemoryAmount::Kind::kPercentOfCard && gpu.total_memory_bytes == 0)
      return describe(c, "a percent of the card needs the card's total memory, which is unknown");
    const std::uint64_t bytes = resolve_memory_amount(*amount, gpu.total_memory_bytes);
    if (bytes == 0) return describe(c, "the memory limit must be above 0 bytes");
    if (!decided) {
      spec.memory_limit_bytes = bytes;
      spec.memory_source = c.name;
      decided = true;
    }
  }
  for (const auto& c : hami) {
    if (c.value == nullptr) continue;
    auto bytes = parse_hami_memory(c.value);
    if (!bytes) return describe(c, bytes.error());
    if (*bytes == 0) return describe(c, "the memory limit must be above 0 bytes");
    if (!decided) {
      spec.memory_limit_bytes = *bytes;
      spec.memory_source = c.name;
      decided = true;
    }
  }
  return std::nullopt;
}

std::optional<std::string> compute_for(const EnvLookup& env, const VisibleGpu& gpu,
                                       GpuQuotaSpec& spec) {
  auto cushare = lookup_all(env, specific_names("CUSHARE_COMPUTE_LIMIT", gpu));
  auto hami = lookup_all(
      env, {"CUDA_DEVICE_SM_LIMIT_" + std::to_string(gpu.index), "CUDA_DEVICE_SM_LIMIT"});
  bool decided = false;
  for (const auto& c : cushare) {
    if (c.value == nullptr) continue;
    auto pct = parse_compute_percent(c.value);
    if (!pct) return describe(c, pct.error());
    if (!decided) {
      spec.compute_limit_pct = *pct;
      spec.compute_source = c.name;
      decided = true;
    }
  }
  for (const auto& c : hami) {
    if (c.value == nullptr) continue;
    // HAMi-core: 0 (its default) means "no SM limit".
    auto pct = parse_uint_in_range(c.value, 0, 100);
    if (!pct) return describe(c, "SM limit " + pct.error() + " (expected an integer 0..100)");
    if (!decided) {
      spec.compute_limit_pct = *pct == 0 ? 100 : static_cast<std::uint32_t>(*pct);
      spec.compute_source = c.name;
      decided = true;
    }
  }
  return std::nullopt;
}

std::optional<std::string> weight_for(const EnvLookup& env, const VisibleGpu& gpu,
                                      GpuQuotaSpec& spec) {
  spec.weight = spec.compute_limit_pct;
  bool decided = false;
  for (const auto& c : lookup_all(env, specific_names("CUSHARE_COMPUTE_WEIGHT", gpu))) {
    if (c.value == nullptr) continue;
    auto w = parse_uint_in_range(c.value, 1, kMaxWeight);
    if (!w) return describe(c, "weight " + w.error());
    if (!decided) {
      spec.weight = static_cast<std::uint32_t>(*w);
      decided = true;
    }
  }
  return std::nullopt;
}

std::optional<std::string> mode_from(const EnvLookup& env, ComputeMode& mode) {
  mode = ComputeMode::kBurst;
  const char* v = env("CUSHARE_COMPUTE_MODE");
  if (v == nullptr) return std::nullopt;
  const std::string_view s = v;
  if (s == "burst" || s == "Burst" || s == "BURST") {
    mode = ComputeMode::kBurst;
  } else if (s == "capped" || s == "Capped" || s == "CAPPED") {
    mode = ComputeMode::kCapped;
  } else {
    return std::string("CUSHARE_COMPUTE_MODE='") + v + "': expected 'capped' or 'burst'";
  }
  return std::nullopt;
}

}  // namespace

EnvLookup process_env() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

Parsed<std::vector<GpuQuotaSpec>> quota_spec_from_env(const EnvLookup& env,
                                                      std::span<const VisibleGpu> gpus) {
  using R = Parsed<std::vector<GpuQuotaSpec>>;
  if (gpus.size() > kMaxGpus)
    return R::fail(std::to_string(gpus.size()) + " GPUs are visible; cushare supports at most " +
                   std::to_string(kMaxGpus) +
                   " per process (narrow NVIDIA_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES)");
  ComputeMode mode;
  if (auto err = mode_from(env, mode)) return R::fail(*err);
  std::vector<GpuQuotaSpec> specs;
  specs.reserve(gpus.size());
  for (const auto& gpu : gpus) {
    GpuQuotaSpec spec;
    spec.index = gpu.index;
    spec.uuid = gpu.uuid;
    spec.mode = mode;
    if (auto err = memory_for(env, gpu, spec)) return R::fail(*err);
    if (auto err = compute_for(env, gpu, spec)) return R::fail(*err);
    if (auto err = weight_for(env, gpu, spec)) return R::fail(*err);
    specs.push_back(std::move(spec));
  }
  return R::ok(std::move(specs));
}

}  // namespace cushare::shm
