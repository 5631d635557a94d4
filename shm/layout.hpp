// The shared-memory contract: fixed binary layouts of the two region files of
// an allocation (`limits` and `usage`). Every process that maps them (shims in
// containers, the daemon, the device plugin, cusharectl) agrees on these
// offsets, so any change here bumps kLayoutVersion.
//
// Rules (docs/shm.md):
//  - only std::atomic fields that are always lock-free, in standard-layout
//    structs at fixed offsets (checked below);
//  - no process-shared mutex anywhere: a process killed at any instruction
//    must not leave the region unusable;
//  - the creator writes everything, then publishes `header.magic` last
//    (release); readers check magic (acquire), version and size before use.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cushare::shm {

inline constexpr std::uint32_t kLayoutVersion = 1;
inline constexpr std::uint32_t kMaxGpus = 16;
inline constexpr std::uint32_t kMaxSlots = 1024;
inline constexpr std::size_t kUuidBytes = 48;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL
inline constexpr std::size_t kAllocIdBytes = 64;

// "CUSHLIMT" / "CUSHUSAG" in little-endian byte order.
inline constexpr std::uint64_t kLimitsMagic = 0x544D494C48535543ULL;
inline constexpr std::uint64_t kUsageMagic = 0x4741535548535543ULL;

// A memory quota of kUnlimited means "no quota" and is only ever written
// explicitly (CUSHARE_MEMORY_LIMIT unset); it is never the result of a
// parsing failure.
inline constexpr std::uint64_t kUnlimited = UINT64_MAX;

// The uuid of a GpuLimits entry that applies to every GPU not listed by UUID
// (standalone mode with a plain CUSHARE_MEMORY_LIMIT).
inline constexpr char kAnyGpu[] = "*";

enum class ComputeMode : std::uint32_t { kBurst = 0, kCapped = 1 };

// Common header of both regions: 128 bytes.
struct RegionHeader {
  std::atomic<std::uint64_t> magic;  // published last, with release
  std::uint32_t layout_version;
  std::uint32_t header_size;      // sizeof(RegionHeader)
  std::uint64_t total_size;       // sizeof(LimitsRegion) or sizeof(UsageRegion)
  std::uint64_t created_unix_ns;  // CLOCK_REALTIME at creation
  char alloc_id[kAllocIdBytes];   // NUL-terminated allocation id
  std::uint32_t creator_pid;      // in the creator's PID namespace
  std::uint32_t flags;            // RegionFlags
  std::uint8_t reserved[24];
};

enum RegionFlags : std::uint32_t {
  kCreatedStandalone = 1u << 0,  // the first shim created it from its environment
  kCreatedByPlugin = 1u << 1,
  kCreatedByDaemon = 1u << 2,
  kCreatedByCtl = 1u << 3,  // cusharectl create (plain Docker/containerd)
};

// ---------------------------------------------------------------- limits ---
// Written by the daemon, the device plugin or (standalone) the first shim;
// read-only inside the container. Quota fields may change live: writers
// bracket updates with LimitsRegion::generation (seqlock, odd = writing).

// Set in GpuLimits::lease_expiry_ns (1 ns of its time) while the lease is
// cut short for another tenant due back from host work: a launch there
// expected to end more than kCutLeaseOverrunNs past the expiry waits for
// the next lease (a long kernel would keep the returning tenant waiting for
// its end), so an allocation's short kernels use the gap and its long ones
// wait for a whole lease.
inline constexpr std::uint64_t kLeaseCutBit = 1;

struct GpuLimits {                                // 128 bytes
  char uuid[kUuidBytes];                          // immutable after creation; "" = unused entry
  std::atomic<std::uint64_t> memory_limit_bytes;  // kUnlimited = none
  std::atomic<std::uint32_t> compute_limit_pct;   // 1..100: hard cap in capped mode
  std::atomic<std::uint32_t> weight;              // >= 1: fair-share weight
  std::atomic<std::uint32_t> mode;                // ComputeMode
  // Processes of the allocation the daemon killed on ground truth (NVML):
  // above the memory quota past the grace, or running kernels with no lease.
  std::atomic<std::uint32_t> over_quota_kills;
  // Lease words, written by the scheduler in the daemon only.
  // CLOCK_MONOTONIC; may submit while now < expiry. Its lowest bit is
  // kLeaseCutBit.
  std::atomic<std::uint64_t> lease_expiry_ns;
  std::atomic<std::uint32_t>
      lease_futex;  // bumped on every grant and revoke (and ready window); shims FUTEX_WAIT here
  std::atomic<std::uint32_t> lease_holder;  // 1 while this allocation holds the GPU's lease
  std::atomic<std::uint64_t> lease_grants;  // total grants (metrics)
  std::atomic<std::uint64_t> granted_ns;    // total lease time granted (metrics)
  // Published by the daemon for cusharectl and metrics (read-only to tenants).
  std::atomic<std::uint32_t> share_target_ppm;    // entitlement, parts per million of the GPU
  std::atomic<std::uint32_t> share_achieved_ppm;  // achieved over the last 10 s
  std::atomic<std::uint64_t> handoffs;            // leases handed to another allocation
  // GPU time ground truth showed beyond what the leases charged (forged drain
  // marks, work past the shim), charged to it on top.
  std::atomic<std::uint64_t> unleased_busy_ns;
};

struct LimitsRegion {
  RegionHeader header;
  std::atomic<std::uint64_t> generation;           // seqlock over the quota fields of gpus[]
  std::atomic<std::uint32_t> gpu_count;            // entries in use, <= kMaxGpus
  std::atomic<std::uint32_t> daemon_pid;           // host PID of the daemon that last ticked
  std::atomic<std::uint64_t> daemon_heartbeat_ns;  // CLOCK_MONOTONIC of its last tick; 0 = never
  std::atomic<std::uint64_t> quantum_ns;  // the daemon's lease quantum (for local fallback)
  // The daemon's word that a grant to this allocation is near: a thread
  // waiting at the gate for a lease on a GPU whose bit is set in ready_gpus
  // waits on the CPU until ready_until_ns (CLOCK_MONOTONIC) instead of
  // asleep on lease_futex, so that it takes no wake-up to go on once
  // granted. From the reserved bytes of layout v1: older writers leave
  // zeros (never ready).
  std::atomic<std::uint64_t> ready_until_ns;
  std::atomic<std::uint32_t> ready_gpus;
  std::uint8_t reserved[84];
  GpuLimits gpus[kMaxGpus];
};

// ----------------------------------------------------------------- usage ---
// Written by the shims of the allocation's processes (read-write in the
// container) and by the daemon (reclaim, overhead, host PIDs).

struct GpuUsage {  // 128 bytes; index i matches LimitsRegion::gpus[i]
  // Ledger total: tracked bytes plus charged overhead of every live slot.
  std::atomic<std::uint64_t> used_bytes;
  // Processes with a thread waiting at the launch gate (each also sets its
  // bit in ProcessSlot::demand_gpus, so a reclaimer takes a killed waiter's
  // demand back).
  std::atomic<std::uint32_t> demand;
  // Launch gate: the GPU time of one launch, on average, with the time
  // slices the allocation's other busy processes had in it taken out
  // (microseconds, rounded up; 0 = not measured yet; its processes publish
  // theirs in turn). The daemon weighs whether the holder's gate would
  // start a launch in a lease cut for a tenant due back by it times
  // busy_processes, and ends such a lease half a launch of the holder's
  // before the return. Written by the tenant: a
  // figure too low lets the holder's launches run up to their length past a
  // cut lease's end, into the returning tenant's time, charged to the
  // holder (drain marks, ground truth) as any overrun (once 0, shims that
  // predate it leave it there).
  std::atomic<std::uint32_t> per_launch_us;
  std::atomic<std::uint64_t> last_submit_ns;  // drain marks: CLOCK_MONOTONIC of the last submission
  std::atomic<std::uint64_t> drained_ns;      // all work submitted up to this time has completed
  std::atomic<std::uint64_t> launches;
  std::atomic<std::uint64_t> throttled_launches;
  std::atomic<std::uint64_t> throttled_ns;  // time launches spent waiting at the gate
  std::atomic<std::uint64_t> oom_refusals;
  std::atomic<std::uint64_t> last_oom_request_bytes;
  std::atomic<std::uint64_t> last_oom_unix_ns;
  std::atomic<std::uint64_t> busy_ns;  // GPU time charged by the scheduler (metrics)
  // Launch gate: when the work submitted so far should have completed
  // (CLOCK_MONOTONIC; last submission + estimated queue; 0 = no estimate
  // yet). The scheduler defers the next holder's grant until about then, so a
  // long kernel's overrun does not share the GPU with the next holder's work.
  // A thread waiting at the gate for its queue renews it before it passes; a
  // holder waiting at its gate past it gives the lease back (starved).
  std::atomic<std::uint64_t> expected_drain_ns;
  // Processes of the allocation with work in flight on this GPU (each also
  // sets its bit in ProcessSlot::busy_gpus, so a reclaimer can take a dead
  // one's share back). drained_ns speaks for the allocation only while this
  // is 0: one idle process must not declare another one's queue drained.
  std::atomic<std::uint32_t> busy_processes;
  // Bumped by each process whose busy mark takes busy_processes from 0 to 1:
  // a process that left the allocation idle and is the next to make it busy
  // sees it advanced by exactly one, so no other process ran in between.
  std::atomic<std::uint32_t> busy_epoch;
  // When a thread of the allocation last went on from the gate after waiting
  // for a lease (CLOCK_MONOTONIC; the first one after each grant): the
  // scheduler charges a lease from its first launch rather than from the
  // grant, so a slow wake-up (the GPU idle meanwhile) is not charged as use.
  std::atomic<std::uint64_t> resumed_ns;
  // The overhead the last context measured on this GPU took (any process of
  // the allocation): what the next context creation reserves before the
  // driver call. Written by the allocation's own processes, so it can only
  // make its own contexts fit worse or better; ground truth is the backstop.
  std::atomic<std::uint64_t> context_overhead_seen;
  // GPU time the allocation had nothing on the GPU between two spells of
  // work while holding a lease (sync bubbles, host work between steps),
  // measured on the GPU's own clock with timing events, cumulative. The
  // scheduler charges busy time: lease time less these gaps.
  std::atomic<std::uint64_t> idle_ns;
};

enum class SlotState : std::uint32_t {
  kFree = 0,
  kClaiming = 1,  // owner is filling identity fields
  kActive = 2,
  kReclaiming = 3,  // exactly one reclaimer returns the bytes, then frees it
};

struct ProcessSlot {                       // 320 bytes
  std::atomic<std::uint32_t> state;        // SlotState
  std::atomic<std::uint32_t> pid;          // in the owner's PID namespace
  std::atomic<std::uint64_t> pidns_inode;  // st_ino of /proc/self/ns/pid
  std::atomic<std::uint64_t> start_time;   // /proc/self/stat field 22 (clock ticks after boot)
  std::atomic<std::uint32_t> host_pid;     // written by the daemon; 0 = not yet mapped
  std::atomic<std::uint32_t> reserved0;
  std::atomic<std::uint64_t> heartbeat_ns;        // CLOCK_MONOTONIC
  std::atomic<std::uint64_t> bytes[kMaxGpus];     // tracked allocations
  std::atomic<std::uint64_t> overhead[kMaxGpus];  // charged context/module overhead
  std::atomic<std::uint32_t> busy_gpus;           // bit g: counted in gpus[g].busy_processes
  std::atomic<std::uint32_t> demand_gpus;         // bit g: counted in gpus[g].demand
  // Hooked calls that move this process's device memory or its charges,
  // begun and ended: begun - ended are in flight (docs/shm.md).
  std::atomic<std::uint64_t> memory_ops_begun;
  std::atomic<std::uint64_t> memory_ops_ended;
};

struct UsageRegion {
  RegionHeader header;
  std::atomic<std::uint32_t> gpu_count;
  std::uint32_t reserved0;
  std::uint8_t reserved[120];
  GpuUsage gpus[kMaxGpus];
  ProcessSlot slots[kMaxSlots];
};

// ---------------------------------------------------------- layout checks ---

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && sizeof(std::atomic<std::uint32_t>) == 4);

static_assert(std::is_standard_layout_v<RegionHeader> && sizeof(RegionHeader) == 128);
static_assert(std::is_standard_layout_v<GpuLimits> && sizeof(GpuLimits) == 128);
static_assert(std::is_standard_layout_v<GpuUsage> && sizeof(GpuUsage) == 128);
static_assert(std::is_standard_layout_v<ProcessSlot> && sizeof(ProcessSlot) == 320);
static_assert(std::is_standard_layout_v<LimitsRegion>);
static_assert(std::is_standard_layout_v<UsageRegion>);

static_assert(offsetof(RegionHeader, magic) == 0);
static_assert(offsetof(RegionHeader, layout_version) == 8);
static_assert(offsetof(RegionHeader, total_size) == 16);
static_assert(offsetof(RegionHeader, alloc_id) == 32);

static_assert(offsetof(GpuLimits, memory_limit_bytes) == 48);
static_assert(offsetof(GpuLimits, lease_expiry_ns) == 72);
static_assert(offsetof(GpuLimits, lease_futex) % 4 == 0);

static_assert(offsetof(LimitsRegion, generation) == 128);
static_assert(offsetof(LimitsRegion, gpus) == 256);
static_assert(sizeof(LimitsRegion) == 256 + kMaxGpus * sizeof(GpuLimits));
static_assert(offsetof(LimitsRegion, ready_until_ns) == 160);
static_assert(offsetof(LimitsRegion, ready_gpus) == 168);

static_assert(offsetof(UsageRegion, gpus) == 256);
static_assert(offsetof(UsageRegion, slots) == 256 + kMaxGpus * sizeof(GpuUsage));
static_assert(sizeof(UsageRegion) ==
              256 + kMaxGpus * sizeof(GpuUsage) + kMaxSlots * sizeof(ProcessSlot));

static_assert(offsetof(ProcessSlot, bytes) == 40);
static_assert(offsetof(ProcessSlot, overhead) == 40 + 8 * kMaxGpus);
static_assert(offsetof(ProcessSlot, busy_gpus) == 40 + 16 * kMaxGpus);
static_assert(offsetof(ProcessSlot, demand_gpus) == 44 + 16 * kMaxGpus);
static_assert(offsetof(ProcessSlot, memory_ops_begun) == 48 + 16 * kMaxGpus);
static_assert(offsetof(ProcessSlot, memory_ops_ended) == 56 + 16 * kMaxGpus);
static_assert(offsetof(GpuUsage, per_launch_us) == 12);
static_assert(offsetof(GpuUsage, busy_processes) == 96);
static_assert(offsetof(GpuUsage, resumed_ns) == 104);
static_assert(offsetof(GpuUsage, context_overhead_seen) == 112);
static_assert(offsetof(GpuUsage, busy_epoch) == 100);
static_assert(offsetof(GpuUsage, idle_ns) == 120);

}  // namespace cushare::shm
