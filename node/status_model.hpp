// The status model: what cusharectl knows about a node or one allocation.
// Built from the shared-memory regions (directly, or by the daemon, which
// sends it as JSON over the control socket) and rendered as tables or JSON.
// Everything here is plain data; building it takes the clock as a value so
// tests get byte-identical output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shm/daemon_timing.hpp"
#include "shm/layout.hpp"

namespace cushare::tools {

// The two clocks the regions use, read once per snapshot.
struct Now {
  std::uint64_t mono_ns = 0;  // CLOCK_MONOTONIC (heartbeats, leases)
  std::uint64_t unix_ns = 0;  // CLOCK_REALTIME (creation, OOM times)
};
Now read_clocks();

// A heartbeat older than this means its writer is gone (the shims' limit too).
inline constexpr std::uint64_t kDaemonStaleNs = shm::kDaemonHeartbeatStaleNs;

// Whether a daemon heartbeat stamped at `beat_ns` (CLOCK_MONOTONIC, 0 = never)
// is fresh at `now_ns`. A heartbeat newer than `now_ns` is fresh: the daemon
// ticks concurrently, so one written after the reader took its clock is
// normal, not a wrapped-around age.
bool heartbeat_fresh(std::uint64_t beat_ns, std::uint64_t now_ns);

struct GpuInfo {  // a physical GPU, from NVML where available
  int index = -1;
  std::string uuid;
  std::string name;                                 // "" = unknown
  std::optional<std::uint64_t> memory_total_bytes;  // unknown without NVML
};

struct ProcessStatus {
  std::uint32_t slot = 0;
  std::uint32_t pid = 0;       // in the container's PID namespace
  std::uint32_t host_pid = 0;  // 0 = not mapped yet (the daemon maps it)
  std::uint64_t pidns_inode = 0;
  std::optional<std::uint64_t> heartbeat_age_ns;
  std::vector<std::uint64_t> tracked_bytes;   // per entry of Allocation::gpus
  std::vector<std::uint64_t> overhead_bytes;  // per entry of Allocation::gpus
};

struct AllocationGpu {  // one GPU's limits and usage within an allocation
  std::string uuid;     // shm::kAnyGpu ("*") = applies to every GPU
  std::optional<std::uint64_t> memory_limit_bytes;  // nullopt = no quota
  std::uint64_t used_bytes = 0;                     // the ledger: tracked + overhead
  std::uint64_t tracked_bytes = 0;                  // sum over live processes
  std::uint64_t overhead_bytes = 0;                 // context/module overhead charged
  std::string mode;                                 // "capped" | "burst"
  std::uint32_t compute_limit_pct = 100;
  std::uint32_t weight = 100;
  std::optional<std::uint32_t> share_target_ppm;    // published by the daemon
  std::optional<std::uint32_t> share_achieved_ppm;  // over the last 10 s
  bool lease_held = false;
  std::uint64_t lease_grants = 0;
  std::uint64_t granted_ns = 0;
  std::uint64_t handoffs = 0;
  std::uint64_t busy_ns = 0;
  std::uint64_t launches = 0;
  std::uint64_t throttled_launches = 0;
  std::uint64_t throttled_ns = 0;
  std::uint32_t demand = 0;          // processes with a thread waiting at the launch gate
  std::uint32_t busy_processes = 0;  // processes with work in flight on the GPU
  std::uint64_t oom_refusals = 0;
  std::uint64_t last_oom_request_bytes = 0;
  std::uint64_t last_oom_unix_ns = 0;
  std::uint32_t processes = 0;
  // What the daemon did on ground truth (NVML): processes it killed (over the
  // memory quota past the grace, or running kernels without leases), and GPU
  // time it charged beyond the leases.
  std::uint32_t over_quota_kills = 0;
  std::uint64_t unleased_busy_ns = 0;
};

struct Allocation {
  std::string id;
  std::string path;  // the allocation's folder
  std::uint64_t created_unix_ns = 0;
  std::string created_by;  // "plugin" | "daemon" | "standalone" | "cusharectl" | "unknown"
  bool has_usage = false;  // false until a shim created the usage region
  std::vector<AllocationGpu> gpus;
  std::vector<ProcessStatus> processes;
};

struct DaemonState {
  bool up = false;
  std::optional<std::uint32_t> pid;
  std::optional<std::uint64_t> heartbeat_age_ns;
  std::optional<std::uint64_t> quantum_ns;
};

struct Problem {  // an allocation that could not be read
  std::string alloc;
  std::string path;
  std::string error;
};

enum class RunDirKind { kNode, kAllocation };

struct Status {
  std::string run_dir;
  RunDirKind kind = RunDirKind::kNode;
  std::string source;  // "daemon" (control socket) | "regions" (read directly)
  std::uint64_t generated_unix_ns = 0;
  DaemonState daemon;
  std::vector<GpuInfo> gpus;
  std::vector<Allocation> allocations;
  std::vector<Problem> problems;
};

// Read-only views of one allocation's regions (usage may not exist yet).
struct RegionViews {
  const shm::LimitsRegion* limits = nullptr;
  const shm::UsageRegion* usage = nullptr;
};

// Whether allocation_from_regions walks the usage region's process slots:
// every one of them, a cache line each, which is most of its cost. kSkip
// leaves Allocation::processes empty and each GPU's tracked_bytes,
// overhead_bytes and processes 0, for a reader at the daemon's figures
// cadence that needs none of them (its metrics).
enum class ProcessSlots { kRead, kSkip };

// One allocation as its regions say now. Limits fields are read under the
// seqlock, so a concurrent `set` never shows half-applied.
Allocation allocation_from_regions(const RegionViews& regions, const std::string& path,
                                   const Now& now, ProcessSlots slots = ProcessSlots::kRead);

// What the allocations' limits regions say about the daemon (its heartbeat).
DaemonState daemon_from_regions(const std::vector<RegionViews>& regions, const Now& now);

std::string_view run_dir_kind_name(RunDirKind kind);
std::string_view mode_name(std::uint32_t mode);

// The GPU an allocation entry applies to, for grouping in tables: the GpuInfo
// with the same UUID, or nullptr (unknown GPU or "*").
const GpuInfo* find_gpu(const std::vector<GpuInfo>& gpus, const std::string& uuid);

}  // namespace cushare::tools
