// `cusharectl set`: parsing the user's values, the request's JSON form on the
// control socket, and applying it to a limits region under the seqlock (the
// daemon does this; `set --no-daemon` does it in-process). Running shims read
// the quota fields on every allocation and launch, so a change is live at once.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "node/set_outcome.hpp"
#include "node/status_model.hpp"
#include "shm/layout.hpp"
#include "shm/quantity.hpp"

namespace cushare::tools {

// The user's input is wrong (exit code 2 on the CLI, "bad_request" on the socket).
class InvalidRequest : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct MemoryLimitArg {
  bool unlimited = false;  // "none" / "unlimited"
  shm::MemoryAmount amount;
};

struct SetRequest {
  std::string alloc;
  std::optional<std::string> gpu;  // UUID, GPU index or "*"; unset = every entry
  std::optional<MemoryLimitArg> memory_limit;
  std::optional<std::uint32_t> compute_limit_pct;
  std::optional<std::uint32_t> weight;
  std::optional<shm::ComputeMode> mode;

  bool empty() const { return !memory_limit && !compute_limit_pct && !weight && !mode; }
};

// Parsers for the command-line values; throw InvalidRequest naming the option.
// A memory limit is a whole number of bytes above 0 (8Gi, 1.5Gi, 512Mi, 1e9),
// a percent of the card (25%) or none: a zero quota could allocate nothing,
// and "1.5" is a typo for 1.5Gi far more often than a request for 2 bytes.
MemoryLimitArg parse_memory_limit_arg(const std::string& text);
std::uint32_t parse_compute_limit_arg(const std::string& text);  // 1..100, optional '%'
std::uint32_t parse_weight_arg(const std::string& text);         // 1..shm::kMaxWeight
shm::ComputeMode parse_mode_arg(const std::string& text);        // capped | burst

nlohmann::json to_json(const SetRequest& request);
SetRequest set_request_from_json(const nlohmann::json& json);  // throws InvalidRequest

// Applies `request` to `limits` (usage: for the below-use warning; may be
// null). `gpus` gives card sizes for percent quotas. Throws InvalidRequest
// when the GPU selector matches nothing or a percent cannot be resolved.
SetOutcome apply_set(shm::LimitsRegion& limits, const shm::UsageRegion* usage,
                     const SetRequest& request, const std::vector<GpuInfo>& gpus);

}  // namespace cushare::tools
