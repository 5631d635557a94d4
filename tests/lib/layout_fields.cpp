// Prints the layout of shm/layout.hpp as the compiler sees it (and the run
// dir's names, shm/run_dir_layout.hpp): every struct's
// size and every field's offset and size, as JSON
//   {"GpuLimits": {"size": 128, "fields": {"uuid": [0, 48], ...}}, ...}
// ctest shm.python_region_reader compares it with the test toolkit's region
// reader (tests/lib/cushare_regions.py). A field listed in neither place but
// carved out of a `reserved` array still shows: the array's size changes.
#include <cstddef>
#include <cstdio>

#include "shm/layout.hpp"
#include "shm/run_dir_layout.hpp"

namespace {

using namespace cushare::shm;

bool g_first_struct = true;
bool g_first_field = true;

void begin(const char* name, std::size_t size) {
  std::printf("%s\n  \"%s\": {\"size\": %zu, \"fields\": {", g_first_struct ? "{" : ",", name,
              size);
  g_first_struct = false;
  g_first_field = true;
}

void field(const char* name, std::size_t offset, std::size_t size) {
  std::printf("%s\"%s\": [%zu, %zu]", g_first_field ? "" : ", ", name, offset, size);
  g_first_field = false;
}

void end() {
  std::printf("}}");
}

}  // namespace

#define FIELD(S, f) field(#f, offsetof(S, f), sizeof(S::f))

int main() {
  begin("RegionHeader", sizeof(RegionHeader));
  FIELD(RegionHeader, magic);
  FIELD(RegionHeader, layout_version);
  FIELD(RegionHeader, header_size);
  FIELD(RegionHeader, total_size);
  FIELD(RegionHeader, created_unix_ns);
  FIELD(RegionHeader, alloc_id);
  FIELD(RegionHeader, creator_pid);
  FIELD(RegionHeader, flags);
  FIELD(RegionHeader, reserved);
  end();

  begin("GpuLimits", sizeof(GpuLimits));
  FIELD(GpuLimits, uuid);
  FIELD(GpuLimits, memory_limit_bytes);
  FIELD(GpuLimits, compute_limit_pct);
  FIELD(GpuLimits, weight);
  FIELD(GpuLimits, mode);
  FIELD(GpuLimits, over_quota_kills);
  FIELD(GpuLimits, lease_expiry_ns);
  FIELD(GpuLimits, lease_futex);
  FIELD(GpuLimits, lease_holder);
  FIELD(GpuLimits, lease_grants);
  FIELD(GpuLimits, granted_ns);
  FIELD(GpuLimits, share_target_ppm);
  FIELD(GpuLimits, share_achieved_ppm);
  FIELD(GpuLimits, handoffs);
  FIELD(GpuLimits, unleased_busy_ns);
  end();

  begin("LimitsRegion", sizeof(LimitsRegion));
  FIELD(LimitsRegion, header);
  FIELD(LimitsRegion, generation);
  FIELD(LimitsRegion, gpu_count);
  FIELD(LimitsRegion, daemon_pid);
  FIELD(LimitsRegion, daemon_heartbeat_ns);
  FIELD(LimitsRegion, quantum_ns);
  FIELD(LimitsRegion, ready_until_ns);
  FIELD(LimitsRegion, ready_gpus);
  FIELD(LimitsRegion, reserved);
  FIELD(LimitsRegion, gpus);
  end();

  begin("GpuUsage", sizeof(GpuUsage));
  FIELD(GpuUsage, used_bytes);
  FIELD(GpuUsage, demand);
  FIELD(GpuUsage, per_launch_us);
  FIELD(GpuUsage, last_submit_ns);
  FIELD(GpuUsage, drained_ns);
  FIELD(GpuUsage, launches);
  FIELD(GpuUsage, throttled_launches);
  FIELD(GpuUsage, throttled_ns);
  FIELD(GpuUsage, oom_refusals);
  FIELD(GpuUsage, last_oom_request_bytes);
  FIELD(GpuUsage, last_oom_unix_ns);
  FIELD(GpuUsage, busy_ns);
  FIELD(GpuUsage, expected_drain_ns);
  FIELD(GpuUsage, busy_processes);
  FIELD(GpuUsage, busy_epoch);
  FIELD(GpuUsage, resumed_ns);
  FIELD(GpuUsage, context_overhead_seen);
  FIELD(GpuUsage, idle_ns);
  end();

  begin("ProcessSlot", sizeof(ProcessSlot));
  FIELD(ProcessSlot, state);
  FIELD(ProcessSlot, pid);
  FIELD(ProcessSlot, pidns_inode);
  FIELD(ProcessSlot, start_time);
  FIELD(ProcessSlot, host_pid);
  FIELD(ProcessSlot, reserved0);
  FIELD(ProcessSlot, heartbeat_ns);
  FIELD(ProcessSlot, bytes);
  FIELD(ProcessSlot, overhead);
  FIELD(ProcessSlot, busy_gpus);
  FIELD(ProcessSlot, demand_gpus);
  FIELD(ProcessSlot, memory_ops_begun);
  FIELD(ProcessSlot, memory_ops_ended);
  end();

  begin("UsageRegion", sizeof(UsageRegion));
  FIELD(UsageRegion, header);
  FIELD(UsageRegion, gpu_count);
  FIELD(UsageRegion, reserved0);
  FIELD(UsageRegion, reserved);
  FIELD(UsageRegion, gpus);
  FIELD(UsageRegion, slots);
  end();

  std::printf(
      ",\n  \"constants\": {\"layout_version\": %u, \"max_gpus\": %u, \"max_slots\": %u, "
      "\"uuid_bytes\": %zu, \"alloc_id_bytes\": %zu, \"limits_magic\": %llu, "
      "\"usage_magic\": %llu}",
      kLayoutVersion, kMaxGpus, kMaxSlots, kUuidBytes, kAllocIdBytes,
      static_cast<unsigned long long>(kLimitsMagic), static_cast<unsigned long long>(kUsageMagic));
  std::printf(
      ",\n  \"names\": {\"socket\": \"%s\", \"alloc\": \"%s\", \"limits\": \"%s\", "
      "\"usage\": \"%s\"}\n}\n",
      kSocketName, kAllocDirName, kLimitsName, kUsageName);
  return 0;
}
