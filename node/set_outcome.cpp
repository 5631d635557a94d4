#include "node/set_outcome.hpp"

#include "node/format.hpp"
#include "node/status_model.hpp"

namespace cushare::tools {

using nlohmann::json;

namespace {

json limits_json(const shm::GpuLimitsSnapshot& v) {
  return json{
      {"memory_limit_bytes",
       v.memory_limit_bytes == shm::kUnlimited ? json(nullptr) : json(v.memory_limit_bytes)},
      {"compute_limit_pct", v.compute_limit_pct},
      {"weight", v.weight},
      {"mode", std::string(mode_name(static_cast<std::uint32_t>(v.mode)))}};
}

shm::GpuLimitsSnapshot limits_from_json(const json& j) {
  shm::GpuLimitsSnapshot v;
  const json& memory = j.at("memory_limit_bytes");
  v.memory_limit_bytes = memory.is_null() ? shm::kUnlimited : memory.get<std::uint64_t>();
  v.compute_limit_pct = j.at("compute_limit_pct").get<std::uint32_t>();
  v.weight = j.at("weight").get<std::uint32_t>();
  v.mode = j.at("mode").get<std::string>() == "capped" ? shm::ComputeMode::kCapped
                                                       : shm::ComputeMode::kBurst;
  return v;
}

// The fields a change touched, by their JSON names.
std::vector<std::string> changed_fields(const SetChange& c) {
  std::vector<std::string> fields;
  if (c.before.memory_limit_bytes != c.after.memory_limit_bytes)
    fields.emplace_back("memory_limit_bytes");
  if (c.before.compute_limit_pct != c.after.compute_limit_pct)
    fields.emplace_back("compute_limit_pct");
  if (c.before.weight != c.after.weight) fields.emplace_back("weight");
  if (c.before.mode != c.after.mode) fields.emplace_back("mode");
  return fields;
}

}  // namespace

json to_json(const SetOutcome& o) {
  json entries = json::array();
  for (const auto& c : o.entries)
    entries.push_back(json{{"uuid", c.uuid},
                           {"before", limits_json(c.before)},
                           {"after", limits_json(c.after)},
                           {"changed", changed_fields(c)}});
  return json{{"alloc", o.alloc}, {"entries", entries}, {"warnings", o.warnings}};
}

SetOutcome set_outcome_from_json(const json& j) {
  SetOutcome o;
  o.alloc = j.at("alloc").get<std::string>();
  for (const auto& e : j.at("entries"))
    o.entries.push_back(SetChange{e.at("uuid").get<std::string>(), limits_from_json(e.at("before")),
                                  limits_from_json(e.at("after"))});
  o.warnings = j.value("warnings", std::vector<std::string>{});
  return o;
}

std::string describe(const SetChange& c) {
  std::string line = c.uuid + ":";
  auto add = [&](const char* what, const std::string& from, const std::string& to) {
    if (from != to) line += std::string(" ") + what + " " + from + " -> " + to + ",";
  };
  auto quota = [](std::uint64_t b) {
    return format_quota(b == shm::kUnlimited ? std::nullopt : std::optional<std::uint64_t>(b));
  };
  add("memory", quota(c.before.memory_limit_bytes), quota(c.after.memory_limit_bytes));
  add("compute", std::to_string(c.before.compute_limit_pct) + "%",
      std::to_string(c.after.compute_limit_pct) + "%");
  add("weight", std::to_string(c.before.weight), std::to_string(c.after.weight));
  add("mode", std::string(mode_name(static_cast<std::uint32_t>(c.before.mode))),
      std::string(mode_name(static_cast<std::uint32_t>(c.after.mode))));
  if (line.back() == ',')
    line.pop_back();
  else
    line += " unchanged";
  return line;
}

}  // namespace cushare::tools
