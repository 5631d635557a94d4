#include "node/status_json.hpp"

namespace cushare::tools {

using nlohmann::json;

namespace {

template <typename T>
json optional_json(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

template <typename T>
std::optional<T> optional_from(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<T>();
}

json gpu_entry_json(const AllocationGpu& g) {
  return json{
      {"uuid", g.uuid},
      {"memory",
       {{"limit_bytes", optional_json(g.memory_limit_bytes)},
        {"used_bytes", g.used_bytes},
        {"tracked_bytes", g.tracked_bytes},
        {"overhead_bytes", g.overhead_bytes},
        {"oom_refusals", g.oom_refusals},
        {"last_oom_request_bytes", g.last_oom_request_bytes},
        {"last_oom_unix_ns", g.last_oom_unix_ns}}},
      {"compute",
       {{"mode", g.mode},
        {"limit_pct", g.compute_limit_pct},
        {"weight", g.weight},
        {"share_target_ppm", optional_json(g.share_target_ppm)},
        {"share_achieved_ppm", optional_json(g.share_achieved_ppm)},
        {"launches", g.launches},
        {"throttled_launches", g.throttled_launches},
        {"throttled_ns", g.throttled_ns},
        {"demand", g.demand},
        {"busy_processes", g.busy_processes}}},
      {"lease",
       {{"held", g.lease_held},
        {"grants", g.lease_grants},
        {"granted_ns", g.granted_ns},
        {"handoffs", g.handoffs},
        {"busy_ns", g.busy_ns}}},
      {"ground_truth",
       {{"over_quota_kills", g.over_quota_kills}, {"unleased_busy_ns", g.unleased_busy_ns}}},
      {"processes", g.processes},
  };
}

AllocationGpu gpu_entry_from_json(const json& j) {
  AllocationGpu g;
  g.uuid = j.at("uuid").get<std::string>();
  const json& m = j.at("memory");
  g.memory_limit_bytes = optional_from<std::uint64_t>(m, "limit_bytes");
  g.used_bytes = m.at("used_bytes").get<std::uint64_t>();
  g.tracked_bytes = m.at("tracked_bytes").get<std::uint64_t>();
  g.overhead_bytes = m.at("overhead_bytes").get<std::uint64_t>();
  g.oom_refusals = m.at("oom_refusals").get<std::uint64_t>();
  g.last_oom_request_bytes = m.at("last_oom_request_bytes").get<std::uint64_t>();
  g.last_oom_unix_ns = m.at("last_oom_unix_ns").get<std::uint64_t>();
  const json& c = j.at("compute");
  g.mode = c.at("mode").get<std::string>();
  g.compute_limit_pct = c.at("limit_pct").get<std::uint32_t>();
  g.weight = c.at("weight").get<std::uint32_t>();
  g.share_target_ppm = optional_from<std::uint32_t>(c, "share_target_ppm");
  g.share_achieved_ppm = optional_from<std::uint32_t>(c, "share_achieved_ppm");
  g.launches = c.at("launches").get<std::uint64_t>();
  g.throttled_launches = c.at("throttled_launches").get<std::uint64_t>();
  g.throttled_ns = c.at("throttled_ns").get<std::uint64_t>();
  g.demand = c.at("demand").get<std::uint32_t>();
  g.busy_processes = c.value("busy_processes", std::uint32_t{0});
  const json& l = j.at("lease");
  g.lease_held = l.at("held").get<bool>();
  g.lease_grants = l.at("grants").get<std::uint64_t>();
  g.granted_ns = l.at("granted_ns").get<std::uint64_t>();
  g.handoffs = l.at("handoffs").get<std::uint64_t>();
  g.busy_ns = l.at("busy_ns").get<std::uint64_t>();
  if (const auto it = j.find("ground_truth"); it != j.end()) {
    g.over_quota_kills = it->value("over_quota_kills", std::uint32_t{0});
    g.unleased_busy_ns = it->value("unleased_busy_ns", std::uint64_t{0});
  }
  g.processes = j.at("processes").get<std::uint32_t>();
  return g;
}

json process_json(const ProcessStatus& p) {
  return json{{"slot", p.slot},
              {"pid", p.pid},
              {"host_pid", p.host_pid == 0 ? json(nullptr) : json(p.host_pid)},
              {"pidns_inode", p.pidns_inode},
              {"heartbeat_age_ns", optional_json(p.heartbeat_age_ns)},
              {"tracked_bytes", p.tracked_bytes},
              {"overhead_bytes", p.overhead_bytes}};
}

ProcessStatus process_from_json(const json& j) {
  ProcessStatus p;
  p.slot = j.at("slot").get<std::uint32_t>();
  p.pid = j.at("pid").get<std::uint32_t>();
  p.host_pid = optional_from<std::uint32_t>(j, "host_pid").value_or(0);
  p.pidns_inode = j.at("pidns_inode").get<std::uint64_t>();
  p.heartbeat_age_ns = optional_from<std::uint64_t>(j, "heartbeat_age_ns");
  p.tracked_bytes = j.at("tracked_bytes").get<std::vector<std::uint64_t>>();
  p.overhead_bytes = j.at("overhead_bytes").get<std::vector<std::uint64_t>>();
  return p;
}

}  // namespace

json to_json(const GpuInfo& gpu) {
  return json{{"index", gpu.index},
              {"uuid", gpu.uuid},
              {"name", gpu.name.empty() ? json(nullptr) : json(gpu.name)},
              {"memory_total_bytes", optional_json(gpu.memory_total_bytes)}};
}

json to_json(const Allocation& alloc) {
  json gpus = json::array();
  for (const auto& g : alloc.gpus) gpus.push_back(gpu_entry_json(g));
  json procs = json::array();
  for (const auto& p : alloc.processes) procs.push_back(process_json(p));
  return json{{"id", alloc.id},
              {"path", alloc.path},
              {"created_unix_ns", alloc.created_unix_ns},
              {"created_by", alloc.created_by},
              {"has_usage", alloc.has_usage},
              {"gpus", gpus},
              {"processes", procs}};
}

json to_json(const Status& status) {
  json gpus = json::array();
  for (const auto& g : status.gpus) gpus.push_back(to_json(g));
  json allocs = json::array();
  for (const auto& a : status.allocations) allocs.push_back(to_json(a));
  json problems = json::array();
  for (const auto& p : status.problems)
    problems.push_back(json{{"alloc", p.alloc}, {"path", p.path}, {"error", p.error}});
  return json{{"schema_version", kJsonSchemaVersion},
              {"run_dir", status.run_dir},
              {"kind", std::string(run_dir_kind_name(status.kind))},
              {"source", status.source},
              {"generated_unix_ns", status.generated_unix_ns},
              {"daemon",
               {{"up", status.daemon.up},
                {"pid", optional_json(status.daemon.pid)},
                {"heartbeat_age_ns", optional_json(status.daemon.heartbeat_age_ns)},
                {"quantum_ns", optional_json(status.daemon.quantum_ns)}}},
              {"gpus", gpus},
              {"allocations", allocs},
              {"problems", problems}};
}

Allocation allocation_from_json(const json& j) {
  Allocation a;
  a.id = j.at("id").get<std::string>();
  a.path = j.at("path").get<std::string>();
  a.created_unix_ns = j.at("created_unix_ns").get<std::uint64_t>();
  a.created_by = j.at("created_by").get<std::string>();
  a.has_usage = j.at("has_usage").get<bool>();
  for (const auto& g : j.at("gpus")) a.gpus.push_back(gpu_entry_from_json(g));
  for (const auto& p : j.at("processes")) a.processes.push_back(process_from_json(p));
  return a;
}

GpuInfo gpu_info_from_json(const json& g) {
  GpuInfo info;
  info.index = g.at("index").get<int>();
  info.uuid = g.at("uuid").get<std::string>();
  info.name = optional_from<std::string>(g, "name").value_or("");
  info.memory_total_bytes = optional_from<std::uint64_t>(g, "memory_total_bytes");
  return info;
}

Status status_from_json(const json& j) {
  Status s;
  s.run_dir = j.at("run_dir").get<std::string>();
  s.kind =
      j.at("kind").get<std::string>() == "allocation" ? RunDirKind::kAllocation : RunDirKind::kNode;
  s.source = j.at("source").get<std::string>();
  s.generated_unix_ns = j.at("generated_unix_ns").get<std::uint64_t>();
  const json& d = j.at("daemon");
  s.daemon.up = d.at("up").get<bool>();
  s.daemon.pid = optional_from<std::uint32_t>(d, "pid");
  s.daemon.heartbeat_age_ns = optional_from<std::uint64_t>(d, "heartbeat_age_ns");
  s.daemon.quantum_ns = optional_from<std::uint64_t>(d, "quantum_ns");
  for (const auto& g : j.at("gpus")) s.gpus.push_back(gpu_info_from_json(g));
  for (const auto& a : j.at("allocations")) s.allocations.push_back(allocation_from_json(a));
  for (const auto& p : j.at("problems"))
    s.problems.push_back(Problem{p.at("alloc").get<std::string>(), p.at("path").get<std::string>(),
                                 p.at("error").get<std::string>()});
  return s;
}

}  // namespace cushare::tools
