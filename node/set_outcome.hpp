// What a `cusharectl set` did: per GPU entry the limits before and after, and
// warnings. The daemon answers the control socket's "set" with its JSON form
// ($defs/set of docs/schema/cusharectl.schema.json); cusharectl prints that
// with -o json and one line per entry otherwise.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shm/limits_seqlock.hpp"

namespace cushare::tools {

struct SetChange {
  std::string uuid;
  shm::GpuLimitsSnapshot before, after;
};

struct SetOutcome {
  std::string alloc;
  std::vector<SetChange> entries;     // every entry the request selected, changed or not
  std::vector<std::string> warnings;  // e.g. quota now below current use
};

nlohmann::json to_json(const SetOutcome& outcome);
SetOutcome set_outcome_from_json(const nlohmann::json& json);  // throws nlohmann's exceptions

// "GPU-x: memory 8Gi -> 4Gi, compute 50% -> 30%", or "GPU-x: unchanged".
std::string describe(const SetChange& change);

}  // namespace cushare::tools
