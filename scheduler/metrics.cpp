#include "scheduler/metrics.hpp"

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <string_view>

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

// One tenant's series: its entry in the read model joined with the daemon's figures.
struct Series {
  std::string labels;
  const TenantFigures* tenant = nullptr;
  const tools::Allocation* alloc = nullptr;
  const tools::AllocationGpu* gpu = nullptr;
};

// Only labels that stay fixed for a series' life: a changed value would start
// a new series and break rate() over counters.
std::string labels(const TenantFigures& t, const MetricsSnapshot& m) {
  const tools::GpuInfo* gpu = tools::find_gpu(m.gpus, t.gpu_uuid);
  const std::string index = gpu != nullptr ? std::to_string(gpu->index) : "";
  shm::PodIdentity pod;
  if (auto who = m.daemon.pods.find(t.allocation); who != m.daemon.pods.end()) pod = who->second;
  return fmt::format(
      "allocation=\"{}\",gpu=\"{}\",UUID=\"{}\",pod=\"{}\",namespace=\"{}\",container=\"{}\"",
      escape_label(t.allocation), escape_label(index), escape_label(t.gpu_uuid),
      escape_label(pod.pod), escape_label(pod.pod_namespace), escape_label(pod.container));
}

// Tenants whose allocation or entry the read model no longer has (it went
// between the daemon's bookkeeping and the read) have no series.
std::vector<Series> series_of(const MetricsSnapshot& m) {
  std::map<std::string_view, const tools::Allocation*> by_id;
  for (const auto& a : m.allocations) by_id.emplace(a.id, &a);
  std::vector<Series> out;
  out.reserve(m.daemon.tenants.size());
  for (const auto& t : m.daemon.tenants) {
    const auto it = by_id.find(t.allocation);
    if (it == by_id.end() || t.entry >= it->second->gpus.size()) continue;
    out.push_back(Series{.labels = labels(t, m),
                         .tenant = &t,
                         .alloc = it->second,
                         .gpu = &it->second->gpus[t.entry]});
  }
  return out;
}

void family(std::string& out, const std::vector<Series>& series, const char* name, const char* type,
            const char* help, const std::function<std::optional<double>(const Series&)>& value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  for (const auto& s : series) {
    if (auto v = value(s)) out += fmt::format("{}{{{}}} {}\n", name, s.labels, *v);
  }
}

std::optional<double> count(std::uint64_t n) {
  return static_cast<double>(n);
}

}  // namespace

std::string render_prometheus(const MetricsSnapshot& m) {
  const std::vector<Series> series = series_of(m);
  std::string out;
  using S = const Series&;
  family(out, series, "cushare_memory_used_bytes", "gauge",
         "Device memory charged to the allocation (tracked allocations plus context overhead).",
         [](S s) { return count(s.gpu->used_bytes); });
  family(out, series, "cushare_memory_quota_bytes", "gauge",
         "Device-memory quota (absent = unlimited).", [](S s) -> std::optional<double> {
           if (!s.gpu->memory_limit_bytes) return std::nullopt;
           return static_cast<double>(*s.gpu->memory_limit_bytes);
         });
  family(out, series, "cushare_gpu_time_seconds_total", "counter",
         "GPU time attributed to the allocation by the lease scheduler.",
         [](S s) { return std::optional<double>(s.tenant->gpu_time_ns / 1e9); });
  family(out, series, "cushare_share_target_ratio", "gauge",
         "Entitled share of the GPU among its busy tenants (0..1).",
         [](S s) { return std::optional<double>(s.gpu->share_target_ppm.value_or(0) / 1e6); });
  family(out, series, "cushare_share_achieved_ratio", "gauge",
         "Share of the GPU attributed over the last 10 s (0..1).",
         [](S s) { return std::optional<double>(s.gpu->share_achieved_ppm.value_or(0) / 1e6); });
  family(out, series, "cushare_compute_limit_ratio", "gauge", "Compute limit (0..1).",
         [](S s) { return std::optional<double>(s.gpu->compute_limit_pct / 100.0); });
  family(out, series, "cushare_cap_busy_scale", "gauge",
         "Capped allocations: lease time per unit of GPU time NVML shows (1 to 1.25); the cap "
         "holds for GPU time, the lease time may reach the limit times this.",
         [](S s) { return s.tenant->busy_scale; });
  family(out, series, "cushare_compute_weight", "gauge", "Fair-share weight.",
         [](S s) { return std::optional<double>(s.gpu->weight); });
  out +=
      "# HELP cushare_compute_mode_info Compute mode of the allocation on the GPU (value 1): "
      "capped (never above its limit) or burst (may use idle time).\n"
      "# TYPE cushare_compute_mode_info gauge\n";
  for (const auto& s : series) {
    out += fmt::format("cushare_compute_mode_info{{{},mode=\"{}\"}} 1\n", s.labels,
                       escape_label(s.gpu->mode));
  }
  family(out, series, "cushare_throttled_seconds_total", "counter",
         "Time launches spent waiting at the launch gate.",
         [](S s) { return std::optional<double>(s.gpu->throttled_ns / 1e9); });
  family(out, series, "cushare_throttled_launches_total", "counter", "Launches that had to wait.",
         [](S s) { return count(s.gpu->throttled_launches); });
  family(out, series, "cushare_launches_total", "counter", "Kernel launches through the gate.",
         [](S s) { return count(s.gpu->launches); });
  family(out, series, "cushare_lease_grants_total", "counter", "Leases granted.",
         [](S s) { return count(s.gpu->lease_grants); });
  family(out, series, "cushare_lease_handoffs_total", "counter",
         "Leases this allocation handed to another one.",
         [](S s) { return count(s.gpu->handoffs); });
  family(out, series, "cushare_oom_refusals_total", "counter", "Allocations refused by the quota.",
         [](S s) { return count(s.gpu->oom_refusals); });
  family(out, series, "cushare_processes", "gauge",
         "Live processes of the allocation (verified by the daemon).",
         [](S s) { return count(s.tenant->processes); });
  family(out, series, "cushare_usage_region_valid", "gauge",
         "1 while the allocation's usage region is valid; 0: damaged by its processes, no GPU "
         "time until it is valid again.",
         [](S s) { return std::optional<double>(s.alloc->has_usage ? 1 : 0); });
  family(out, series, "cushare_over_quota_kills_total", "counter",
         "Processes killed because ground truth (NVML) showed the allocation above its memory "
         "quota past the grace, or running kernels without leases.",
         [](S s) { return count(s.gpu->over_quota_kills); });
  family(out, series, "cushare_unleased_gpu_time_seconds_total", "counter",
         "GPU time ground truth showed beyond what the allocation's leases were charged (charged "
         "on top).",
         [](S s) { return std::optional<double>(s.gpu->unleased_busy_ns / 1e9); });
  out += fmt::format(
      "# HELP cushare_allocations Allocations the daemon manages.\n# TYPE cushare_allocations "
      "gauge\ncushare_allocations {}\n",
      m.allocations.size());
  out += fmt::format(
      "# HELP cushare_reclaimed_slots_total Process slots of dead processes reclaimed.\n"
      "# TYPE cushare_reclaimed_slots_total counter\ncushare_reclaimed_slots_total {}\n",
      m.daemon.reclaimed_slots_total);
  out += fmt::format(
      "# HELP cushare_reclaimed_bytes_total Device memory returned from dead processes.\n"
      "# TYPE cushare_reclaimed_bytes_total counter\ncushare_reclaimed_bytes_total {}\n",
      m.daemon.reclaimed_bytes_total);
  out += fmt::format(
      "# HELP cushare_ledger_repairs_total Allocation ledgers found disagreeing with their live "
      "processes and repaired.\n# TYPE cushare_ledger_repairs_total counter\n"
      "cushare_ledger_repairs_total {}\n",
      m.daemon.ledger_repairs_total);
  return out;
}

}  // namespace cushare::sched
