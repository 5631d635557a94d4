// Prometheus text exposition of the daemon's figures (pure rendering; the
// HTTP side is metrics_server.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cushare::sched {

struct TenantMetrics {
  std::string allocation;
  // dcgm-exporter's GPU labels, so the two join: `gpu` is the GPU's NVML
  // index on the node ("" while NVML does not know it, e.g. a '*' entry whose
  // GPU is not known yet), `UUID` its UUID.
  std::string gpu;
  std::string gpu_uuid;
  // The pod the allocation belongs to (RUN/identity, written by the device
  // plugin); empty for allocations made without Kubernetes.
  std::string pod;
  std::string pod_namespace;
  std::string container;
  std::string mode;  // "capped" / "burst": a series of its own, it can change
  std::uint32_t compute_limit_pct = 100;
  std::uint32_t weight = 100;
  std::uint64_t memory_used_bytes = 0;
  std::uint64_t memory_quota_bytes = 0;  // UINT64_MAX = unlimited (not exported)
  std::uint64_t gpu_time_ns = 0;         // attributed by the scheduler
  std::uint32_t share_target_ppm = 0;
  std::uint32_t share_achieved_ppm = 0;
  std::uint64_t throttled_ns = 0;
  std::uint64_t throttled_launches = 0;
  std::uint64_t launches = 0;
  std::uint64_t lease_grants = 0;
  std::uint64_t lease_handoffs = 0;
  std::uint64_t oom_refusals = 0;
  std::uint32_t processes = 0;             // verified by the daemon
  bool usage_valid = true;                 // false: its usage region is damaged, no GPU time
  std::uint32_t over_quota_kills = 0;      // processes killed on ground truth
  std::uint64_t unleased_gpu_time_ns = 0;  // charged from ground truth beyond its leases
};

struct DaemonMetrics {
  std::vector<TenantMetrics> tenants;
  std::uint64_t allocations = 0;
  std::uint64_t reclaimed_slots_total = 0;
  std::uint64_t reclaimed_bytes_total = 0;
  std::uint64_t ledger_repairs_total = 0;
};

std::string render_prometheus(const DaemonMetrics& m);

}  // namespace cushare::sched
