// Prometheus text exposition of the daemon's figures (pure rendering; the
// HTTP side is metrics_server.hpp). The regions are read through the node's
// read model (node/status_model.hpp), the one cusharectl and the control
// socket use; beside it come only the figures the daemon alone holds.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "node/status_model.hpp"
#include "shm/pod_identity.hpp"

namespace cushare::sched {

// A limits entry the daemon arbitrates (one series per family), with what
// only the daemon knows of it.
struct TenantFigures {
  std::string allocation;  // tools::Allocation::id
  unsigned entry = 0;      // index in tools::Allocation::gpus
  // The GPU it is arbitrated on: the entry's UUID, or for a '*' entry the GPU
  // NVML shows its processes on ('*' while that is not known).
  std::string gpu_uuid;
  std::uint32_t processes = 0;  // of the allocation, verified by the daemon
  // GPU time the scheduler attributed. The usage region's busy_ns is a copy
  // the allocation's own processes can overwrite, so metrics never read it.
  std::uint64_t gpu_time_ns = 0;
  // A capped entry's lease time per unit of the GPU time ground truth shows
  // (sched::LeaseBusyRatio, 1 to kMaxBusyScale): its cap clock runs at its
  // limit times this. Absent for burst entries (their time is not scaled).
  std::optional<double> busy_scale;
};

// What the daemon holds beyond the regions.
struct DaemonFigures {
  std::vector<TenantFigures> tenants;
  // The pod of each allocation (RUN/identity, node/pod_identity_file.hpp);
  // absent for allocations made without Kubernetes.
  std::map<std::string, shm::PodIdentity> pods;
  std::uint64_t reclaimed_slots_total = 0;
  std::uint64_t reclaimed_bytes_total = 0;
  std::uint64_t ledger_repairs_total = 0;
};

struct MetricsSnapshot {
  // Every allocation the daemon manages, as the read model has its regions
  // (the daemon's own mappings: a damaged usage region reads as none).
  std::vector<tools::Allocation> allocations;
  // The node's GPUs by NVML index: the `gpu` label, as dcgm-exporter's, so
  // the two join. A UUID NVML does not know gets an empty one.
  std::vector<tools::GpuInfo> gpus;
  DaemonFigures daemon;
};

std::string render_prometheus(const MetricsSnapshot& m);

}  // namespace cushare::sched
