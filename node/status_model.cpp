#include "node/status_model.hpp"

#include <algorithm>
#include <cstring>

#include "node/region_reader.hpp"
#include "shm/clock.hpp"
#include "shm/limits_seqlock.hpp"

namespace cushare::tools {

namespace {

std::string bounded_string(const char* chars, std::size_t capacity) {
  return std::string(chars, strnlen(chars, capacity));
}

std::string creator_name(std::uint32_t flags) {
  if (flags & shm::kCreatedByPlugin) return "plugin";
  if (flags & shm::kCreatedByDaemon) return "daemon";
  if (flags & shm::kCreatedStandalone) return "standalone";
  if (flags & kCreatedByCtl) return "cusharectl";
  return "unknown";
}

bool daemon_alive(const shm::LimitsRegion& limits, const Now& now) {
  return heartbeat_fresh(limits.daemon_heartbeat_ns.load(std::memory_order_acquire), now.mono_ns);
}

}  // namespace

bool heartbeat_fresh(std::uint64_t beat_ns, std::uint64_t now_ns) {
  if (beat_ns == 0) return false;
  return beat_ns >= now_ns || now_ns - beat_ns < kDaemonStaleNs;
}

Now read_clocks() {
  return Now{shm::monotonic_ns(), shm::realtime_ns()};
}

std::string_view run_dir_kind_name(RunDirKind kind) {
  return kind == RunDirKind::kNode ? "node" : "allocation";
}

std::string_view mode_name(std::uint32_t mode) {
  return mode == static_cast<std::uint32_t>(shm::ComputeMode::kCapped) ? "capped" : "burst";
}

const GpuInfo* find_gpu(const std::vector<GpuInfo>& gpus, const std::string& uuid) {
  for (const auto& gpu : gpus)
    if (gpu.uuid == uuid) return &gpu;
  return nullptr;
}

Allocation allocation_from_regions(const RegionViews& regions, const std::string& path,
                                   const Now& now, ProcessSlots slots) {
  const shm::LimitsRegion& limits = *regions.limits;
  Allocation alloc;
  alloc.id = bounded_string(limits.header.alloc_id, shm::kAllocIdBytes);
  alloc.path = path;
  alloc.created_unix_ns = limits.header.created_unix_ns;
  alloc.created_by = creator_name(limits.header.flags);
  alloc.has_usage = regions.usage != nullptr;
  const bool daemon_up = daemon_alive(limits, now);

  const std::uint32_t gpu_count =
      std::min(limits.gpu_count.load(std::memory_order_acquire), shm::kMaxGpus);
  for (std::uint32_t i = 0; i < gpu_count; ++i) {
    const shm::GpuLimitsSnapshot values = shm::read_gpu_limits(limits, i);
    const shm::GpuLimits& words = limits.gpus[i];
    AllocationGpu gpu;
    gpu.uuid = bounded_string(words.uuid, shm::kUuidBytes);
    if (values.memory_limit_bytes != shm::kUnlimited)
      gpu.memory_limit_bytes = values.memory_limit_bytes;
    gpu.mode = std::string(mode_name(static_cast<std::uint32_t>(values.mode)));
    gpu.compute_limit_pct = values.compute_limit_pct;
    gpu.weight = values.weight;
    // Share figures are only meaningful while the daemon publishes them.
    if (daemon_up) {
      gpu.share_target_ppm = words.share_target_ppm.load(std::memory_order_relaxed);
      gpu.share_achieved_ppm = words.share_achieved_ppm.load(std::memory_order_relaxed);
      gpu.lease_held = words.lease_holder.load(std::memory_order_relaxed) != 0;
    }
    gpu.lease_grants = words.lease_grants.load(std::memory_order_relaxed);
    gpu.granted_ns = words.granted_ns.load(std::memory_order_relaxed);
    gpu.handoffs = words.handoffs.load(std::memory_order_relaxed);
    gpu.over_quota_kills = words.over_quota_kills.load(std::memory_order_relaxed);
    gpu.unleased_busy_ns = words.unleased_busy_ns.load(std::memory_order_relaxed);
    if (regions.usage != nullptr) {
      const shm::GpuUsage& usage = regions.usage->gpus[i];
      gpu.used_bytes = usage.used_bytes.load(std::memory_order_relaxed);
      gpu.demand = usage.demand.load(std::memory_order_relaxed);
      gpu.busy_processes = usage.busy_processes.load(std::memory_order_relaxed);
      gpu.launches = usage.launches.load(std::memory_order_relaxed);
      gpu.throttled_launches = usage.throttled_launches.load(std::memory_order_relaxed);
      gpu.throttled_ns = usage.throttled_ns.load(std::memory_order_relaxed);
      gpu.oom_refusals = usage.oom_refusals.load(std::memory_order_relaxed);
      gpu.last_oom_request_bytes = usage.last_oom_request_bytes.load(std::memory_order_relaxed);
      gpu.last_oom_unix_ns = usage.last_oom_unix_ns.load(std::memory_order_relaxed);
      gpu.busy_ns = usage.busy_ns.load(std::memory_order_relaxed);
    }
    alloc.gpus.push_back(std::move(gpu));
  }

  if (regions.usage != nullptr && slots == ProcessSlots::kRead) {
    for (std::uint32_t s = 0; s < shm::kMaxSlots; ++s) {
      const shm::ProcessSlot& slot = regions.usage->slots[s];
      if (slot.state.load(std::memory_order_acquire) !=
          static_cast<std::uint32_t>(shm::SlotState::kActive))
        continue;
      ProcessStatus proc;
      proc.slot = s;
      proc.pid = slot.pid.load(std::memory_order_relaxed);
      proc.host_pid = slot.host_pid.load(std::memory_order_relaxed);
      proc.pidns_inode = slot.pidns_inode.load(std::memory_order_relaxed);
      const std::uint64_t beat = slot.heartbeat_ns.load(std::memory_order_relaxed);
      if (beat != 0) proc.heartbeat_age_ns = now.mono_ns > beat ? now.mono_ns - beat : 0;
      for (std::uint32_t i = 0; i < gpu_count; ++i) {
        const std::uint64_t bytes = slot.bytes[i].load(std::memory_order_relaxed);
        const std::uint64_t overhead = slot.overhead[i].load(std::memory_order_relaxed);
        proc.tracked_bytes.push_back(bytes);
        proc.overhead_bytes.push_back(overhead);
        alloc.gpus[i].tracked_bytes += bytes;
        alloc.gpus[i].overhead_bytes += overhead;
        // With one GPU every process counts; with several, those that hold memory there.
        if (gpu_count == 1 || bytes + overhead > 0) ++alloc.gpus[i].processes;
      }
      alloc.processes.push_back(std::move(proc));
    }
  }
  return alloc;
}

DaemonState daemon_from_regions(const std::vector<RegionViews>& regions, const Now& now) {
  DaemonState state;
  for (const auto& view : regions) {
    const shm::LimitsRegion& limits = *view.limits;
    const std::uint64_t beat = limits.daemon_heartbeat_ns.load(std::memory_order_acquire);
    if (beat == 0) continue;
    const std::uint64_t age = now.mono_ns > beat ? now.mono_ns - beat : 0;
    if (!state.heartbeat_age_ns || age < *state.heartbeat_age_ns) {
      state.heartbeat_age_ns = age;
      state.pid = limits.daemon_pid.load(std::memory_order_relaxed);
      state.quantum_ns = limits.quantum_ns.load(std::memory_order_relaxed);
    }
  }
  // Ages of heartbeats newer than `now` are 0 (see heartbeat_fresh).
  state.up = state.heartbeat_age_ns && *state.heartbeat_age_ns < kDaemonStaleNs;
  return state;
}

}  // namespace cushare::tools
