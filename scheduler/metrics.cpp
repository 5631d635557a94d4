#include "scheduler/metrics.hpp"

#include <fmt/format.h>

#include <functional>
#include <optional>

namespace cushare::sched {
namespace {

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// Only labels that stay fixed for a series' life: a changed value would start
// a new series and break rate() over counters.
std::string labels(const TenantMetrics& t) {
  return fmt::format(
      "allocation=\"{}\",gpu=\"{}\",UUID=\"{}\",pod=\"{}\",namespace=\"{}\",container=\"{}\"",
      escape_label(t.allocation), escape_label(t.gpu), escape_label(t.gpu_uuid),
      escape_label(t.pod), escape_label(t.pod_namespace), escape_label(t.container));
}

void family(std::string& out, const DaemonMetrics& m, const char* name, const char* type,
            const char* help,
            const std::function<std::optional<double>(const TenantMetrics&)>& value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  for (const auto& t : m.tenants) {
    if (auto v = value(t)) out += fmt::format("{}{{{}}} {}\n", name, labels(t), *v);
  }
}

}  // namespace

std::string render_prometheus(const DaemonMetrics& m) {
  std::string out;
  using T = const TenantMetrics&;
  family(out, m, "cushare_memory_used_bytes", "gauge",
         "Device memory charged to the allocation (tracked allocations plus context overhead).",
         [](T t) { return std::optional<double>(static_cast<double>(t.memory_used_bytes)); });
  family(out, m, "cushare_memory_quota_bytes", "gauge", "Device-memory quota (absent = unlimited).",
         [](T t) -> std::optional<double> {
           if (t.memory_quota_bytes == UINT64_MAX) return std::nullopt;
           return static_cast<double>(t.memory_quota_bytes);
         });
  family(out, m, "cushare_gpu_time_seconds_total", "counter",
         "GPU time attributed to the allocation by the lease scheduler.",
         [](T t) { return std::optional<double>(t.gpu_time_ns / 1e9); });
  family(out, m, "cushare_share_target_ratio", "gauge",
         "Entitled share of the GPU among its busy tenants (0..1).",
         [](T t) { return std::optional<double>(t.share_target_ppm / 1e6); });
  family(out, m, "cushare_share_achieved_ratio", "gauge",
         "Share of the GPU attributed over the last 10 s (0..1).",
         [](T t) { return std::optional<double>(t.share_achieved_ppm / 1e6); });
  family(out, m, "cushare_compute_limit_ratio", "gauge", "Compute limit (0..1).",
         [](T t) { return std::optional<double>(t.compute_limit_pct / 100.0); });
  family(out, m, "cushare_compute_weight", "gauge", "Fair-share weight.",
         [](T t) { return std::optional<double>(t.weight); });
  out +=
      "# HELP cushare_compute_mode_info Compute mode of the allocation on the GPU (value 1): "
      "capped (never above its limit) or burst (may use idle time).\n"
      "# TYPE cushare_compute_mode_info gauge\n";
  for (const auto& t : m.tenants) {
    out += fmt::format("cushare_compute_mode_info{{{},mode=\"{}\"}} 1\n", labels(t),
                       escape_label(t.mode));
  }
  family(out, m, "cushare_throttled_seconds_total", "counter",
         "Time launches spent waiting at the launch gate.",
         [](T t) { return std::optional<double>(t.throttled_ns / 1e9); });
  family(out, m, "cushare_throttled_launches_total", "counter", "Launches that had to wait.",
         [](T t) { return std::optional<double>(static_cast<double>(t.throttled_launches)); });
  family(out, m, "cushare_launches_total", "counter", "Kernel launches through the gate.",
         [](T t) { return std::optional<double>(static_cast<double>(t.launches)); });
  family(out, m, "cushare_lease_grants_total", "counter", "Leases granted.",
         [](T t) { return std::optional<double>(static_cast<double>(t.lease_grants)); });
  family(out, m, "cushare_lease_handoffs_total", "counter",
         "Leases this allocation handed to another one.",
         [](T t) { return std::optional<double>(static_cast<double>(t.lease_handoffs)); });
  family(out, m, "cushare_oom_refusals_total", "counter", "Allocations refused by the quota.",
         [](T t) { return std::optional<double>(static_cast<double>(t.oom_refusals)); });
  family(out, m, "cushare_processes", "gauge",
         "Live processes of the allocation (verified by the daemon).",
         [](T t) { return std::optional<double>(t.processes); });
  family(out, m, "cushare_usage_region_valid", "gauge",
         "1 while the allocation's usage region is valid; 0: damaged by its processes, no GPU "
         "time until it is valid again.",
         [](T t) { return std::optional<double>(t.usage_valid ? 1 : 0); });
  family(out, m, "cushare_over_quota_kills_total", "counter",
         "Processes killed because ground truth (NVML) showed the allocation above its memory "
         "quota past the grace, or running kernels without leases.",
         [](T t) { return std::optional<double>(t.over_quota_kills); });
  family(out, m, "cushare_unleased_gpu_time_seconds_total", "counter",
         "GPU time ground truth showed beyond what the allocation's leases were charged (charged "
         "on top).",
         [](T t) { return std::optional<double>(t.unleased_gpu_time_ns / 1e9); });
  out += fmt::format(
      "# HELP cushare_allocations Allocations the daemon manages.\n# TYPE cushare_allocations "
      "gauge\ncushare_allocations {}\n",
      m.allocations);
  out += fmt::format(
      "# HELP cushare_reclaimed_slots_total Process slots of dead processes reclaimed.\n"
      "# TYPE cushare_reclaimed_slots_total counter\ncushare_reclaimed_slots_total {}\n",
      m.reclaimed_slots_total);
  out += fmt::format(
      "# HELP cushare_reclaimed_bytes_total Device memory returned from dead processes.\n"
      "# TYPE cushare_reclaimed_bytes_total counter\ncushare_reclaimed_bytes_total {}\n",
      m.reclaimed_bytes_total);
  out += fmt::format(
      "# HELP cushare_ledger_repairs_total Allocation ledgers found disagreeing with their live "
      "processes and repaired.\n# TYPE cushare_ledger_repairs_total counter\n"
      "cushare_ledger_repairs_total {}\n",
      m.ledger_repairs_total);
  return out;
}

}  // namespace cushare::sched
