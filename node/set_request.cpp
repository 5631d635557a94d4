#include "node/set_request.hpp"

#include <cstring>

#include "node/format.hpp"
#include "node/whole_bytes.hpp"
#include "shm/limits_seqlock.hpp"
#include "shm/quota_spec.hpp"

namespace cushare::tools {

using nlohmann::json;

MemoryLimitArg parse_memory_limit_arg(const std::string& text) {
  if (text == "none" || text == "unlimited") return MemoryLimitArg{true, {}};
  const auto parsed = shm::parse_memory_amount(text);
  if (!parsed)
    throw InvalidRequest("--memory-limit: " + parsed.error() +
                         " (examples: 8Gi, 512Mi, 25%, none)");
  if (parsed->kind == shm::MemoryAmount::Kind::kBytes) {
    if (!is_whole_byte_count(text))
      throw InvalidRequest("--memory-limit: '" + text +
                           "' is not a whole number of bytes: add a unit (1.5Gi, 512Mi) or give "
                           "whole bytes");
    if (parsed->bytes == 0)
      throw InvalidRequest("--memory-limit: '" + text +
                           "' is a zero quota, which allows no allocation at all: give a "
                           "quantity above 0 (512Mi) or none for no quota");
  }
  return MemoryLimitArg{false, *parsed};
}

std::uint32_t parse_compute_limit_arg(const std::string& text) {
  const auto parsed = shm::parse_compute_percent(text);
  if (!parsed)
    throw InvalidRequest("--compute-limit: " + parsed.error() + " (a whole percent 1-100)");
  return *parsed;
}

std::uint32_t parse_weight_arg(const std::string& text) {
  const auto parsed = shm::parse_uint_in_range(text, 1, shm::kMaxWeight);
  if (!parsed)
    throw InvalidRequest("--weight: " + parsed.error() + " (an integer 1-" +
                         std::to_string(shm::kMaxWeight) + ")");
  return static_cast<std::uint32_t>(*parsed);
}

shm::ComputeMode parse_mode_arg(const std::string& text) {
  if (text == "capped") return shm::ComputeMode::kCapped;
  if (text == "burst") return shm::ComputeMode::kBurst;
  throw InvalidRequest("--mode: '" + text + "' is not a mode: use capped or burst");
}

json to_json(const SetRequest& r) {
  json j{{"alloc", r.alloc}};
  if (r.gpu) j["gpu"] = *r.gpu;
  if (r.memory_limit) {
    if (r.memory_limit->unlimited)
      j["memory_limit"] = "none";
    else if (r.memory_limit->amount.kind == shm::MemoryAmount::Kind::kPercentOfCard)
      j["memory_limit_percent_milli"] = r.memory_limit->amount.percent_milli;
    else
      j["memory_limit_bytes"] = r.memory_limit->amount.bytes;
  }
  if (r.compute_limit_pct) j["compute_limit_pct"] = *r.compute_limit_pct;
  if (r.weight) j["weight"] = *r.weight;
  if (r.mode) j["mode"] = std::string(mode_name(static_cast<std::uint32_t>(*r.mode)));
  return j;
}

namespace {
// nlohmann converts -5 to a huge unsigned silently: insist on a non-negative integer.
std::uint64_t unsigned_field(const json& j, const char* key, std::uint64_t min, std::uint64_t max) {
  const json& v = j.at(key);
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() < min || v.get<std::uint64_t>() > max)
    throw InvalidRequest(std::string(key) + " must be an integer " + std::to_string(min) + ".." +
                         std::to_string(max));
  return v.get<std::uint64_t>();
}
}  // namespace

SetRequest set_request_from_json(const json& j) {
  // Values arriving over the socket are checked as strictly as the CLI's.
  try {
    SetRequest r;
    r.alloc = j.at("alloc").get<std::string>();
    if (j.contains("gpu")) r.gpu = j.at("gpu").get<std::string>();
    if (j.contains("memory_limit")) {
      if (j.at("memory_limit") != "none")
        throw InvalidRequest("memory_limit must be \"none\" when given as a string");
      r.memory_limit = MemoryLimitArg{true, {}};
    }
    if (j.contains("memory_limit_bytes")) {
      const auto bytes = unsigned_field(j, "memory_limit_bytes", 1, shm::kUnlimited - 1);
      r.memory_limit = MemoryLimitArg{false, {shm::MemoryAmount::Kind::kBytes, bytes, 0}};
    }
    if (j.contains("memory_limit_percent_milli")) {
      const auto milli =
          static_cast<std::uint32_t>(unsigned_field(j, "memory_limit_percent_milli", 1, 100'000));
      r.memory_limit = MemoryLimitArg{false, {shm::MemoryAmount::Kind::kPercentOfCard, 0, milli}};
    }
    if (j.contains("compute_limit_pct")) {
      r.compute_limit_pct =
          static_cast<std::uint32_t>(unsigned_field(j, "compute_limit_pct", 1, 100));
    }
    if (j.contains("weight")) {
      r.weight = static_cast<std::uint32_t>(unsigned_field(j, "weight", 1, shm::kMaxWeight));
    }
    if (j.contains("mode")) r.mode = parse_mode_arg(j.at("mode").get<std::string>());
    if (r.empty())
      throw InvalidRequest("nothing to set: give a memory limit, compute limit, weight or mode");
    return r;
  } catch (const json::exception& e) {
    throw InvalidRequest(std::string("malformed set request: ") + e.what());
  }
}

namespace {

std::string entry_uuid(const shm::LimitsRegion& limits, unsigned i) {
  return std::string(limits.gpus[i].uuid, strnlen(limits.gpus[i].uuid, shm::kUuidBytes));
}

bool selects(const std::string& selector, const std::string& uuid,
             const std::vector<GpuInfo>& gpus) {
  if (selector == uuid) return true;
  for (const auto& g : gpus)
    if (std::to_string(g.index) == selector && g.uuid == uuid) return true;
  return false;
}

}  // namespace

SetOutcome apply_set(shm::LimitsRegion& limits, const shm::UsageRegion* usage,
                     const SetRequest& request, const std::vector<GpuInfo>& gpus) {
  if (request.empty())
    throw InvalidRequest(
        "nothing to set: give --memory-limit, --compute-limit, --weight or --mode");
  const unsigned count = std::min(limits.gpu_count.load(std::memory_order_acquire), shm::kMaxGpus);

  // Resolve everything first so that a bad value changes no entry at all.
  struct Planned {
    unsigned index;
    shm::GpuLimitsSnapshot before, after;
  };
  std::vector<Planned> plan;
  for (unsigned i = 0; i < count; ++i) {
    const std::string uuid = entry_uuid(limits, i);
    if (request.gpu && !selects(*request.gpu, uuid, gpus)) continue;
    Planned p{i, shm::read_gpu_limits(limits, i), {}};
    p.after = p.before;
    if (request.memory_limit) {
      if (request.memory_limit->unlimited) {
        p.after.memory_limit_bytes = shm::kUnlimited;
      } else if (request.memory_limit->amount.kind == shm::MemoryAmount::Kind::kBytes) {
        p.after.memory_limit_bytes = request.memory_limit->amount.bytes;
      } else {
        const GpuInfo* info = find_gpu(gpus, uuid);
        if (info == nullptr || !info->memory_total_bytes)
          throw InvalidRequest(
              "a percentage quota needs the card's memory size, unknown for GPU '" + uuid +
              "' here: give a quantity such as 8Gi");
        p.after.memory_limit_bytes =
            shm::resolve_memory_amount(request.memory_limit->amount, *info->memory_total_bytes);
      }
    }
    if (request.compute_limit_pct) p.after.compute_limit_pct = *request.compute_limit_pct;
    if (request.weight) p.after.weight = *request.weight;
    if (request.mode) p.after.mode = *request.mode;
    plan.push_back(p);
  }
  if (plan.empty())
    throw InvalidRequest("allocation '" + request.alloc + "' has no GPU entry '" +
                         request.gpu.value_or("") + "': see `cusharectl inspect " + request.alloc +
                         "`");

  SetOutcome outcome;
  outcome.alloc = request.alloc;
  for (const Planned& p : plan) {
    shm::update_gpu_limits(limits, p.index, p.after);
    const std::string uuid = entry_uuid(limits, p.index);
    outcome.entries.push_back(SetChange{uuid, p.before, p.after});

    if (usage != nullptr && p.after.memory_limit_bytes != shm::kUnlimited) {
      const std::uint64_t used = usage->gpus[p.index].used_bytes.load(std::memory_order_relaxed);
      if (used > p.after.memory_limit_bytes)
        outcome.warnings.push_back(
            uuid + ": " + format_bytes(used) + " in use is above the new quota " +
            format_bytes(p.after.memory_limit_bytes) +
            ": new allocations are refused until usage falls below it (nothing is killed)");
    }
  }
  return outcome;
}

}  // namespace cushare::tools
