// JSON form of the status model: what `cusharectl ... --json` prints and what
// the daemon sends over the control socket. Bytes and nanoseconds are raw
// integers; an absent quota or an unknown figure is null. The schema is
// docs/schema/cusharectl-status.schema.json (and -allocation for inspect).
#pragma once

#include <nlohmann/json.hpp>

#include "node/status_model.hpp"

namespace cushare::tools {

inline constexpr int kJsonSchemaVersion = 1;

nlohmann::json to_json(const Status& status);
nlohmann::json to_json(const Allocation& alloc);
nlohmann::json to_json(const GpuInfo& gpu);

// Inverse of to_json; throws nlohmann::json::exception on a malformed document.
Status status_from_json(const nlohmann::json& json);
Allocation allocation_from_json(const nlohmann::json& json);
GpuInfo gpu_info_from_json(const nlohmann::json& g);

}  // namespace cushare::tools
