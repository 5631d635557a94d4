// cushared's main loop: discovers allocations, runs one LeaseScheduler per
// physical GPU (by UUID), publishes leases into the limits regions and wakes
// the waiting shims, keeps the heartbeat, maps slots to host PIDs, reclaims
// dead processes, reconciles context overhead with NVML and publishes the
// figures for metrics and cusharectl. All state a restart needs lives in the
// regions; the in-memory state is rebuilt from them.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "node/status_model.hpp"
#include "scheduler/allocation_registry.hpp"
#include "scheduler/charge_history.hpp"
#include "scheduler/ground_truth.hpp"
#include "scheduler/lease_scheduler.hpp"
#include "scheduler/ledger_check.hpp"
#include "scheduler/metrics.hpp"
#include "scheduler/nvml_reader.hpp"
#include "scheduler/process_verifier.hpp"
#include "scheduler/spare_cpu.hpp"
#include "shm/pod_identity.hpp"

namespace cushare::sched {

struct DaemonConfig {
  std::filesystem::path run_dir;
  SchedulerConfig scheduler;
  std::uint64_t poll_interval_ns = 500'000;  // while any tenant is active
  std::uint64_t idle_poll_interval_ns = 2'000'000;
  std::uint64_t housekeeping_interval_ns = 100'000'000;  // host PIDs, reclaim
  // Ground truth (NVML per-process memory and utilisation) is read this often.
  std::uint64_t nvml_interval_ns = 500'000'000;
  // Between those readings, the processes' utilisation samples are gathered
  // this often (a driver returns only each process's latest).
  std::uint64_t nvml_collect_interval_ns = kNvmlCollectIntervalNs;
  std::string proc_root = "/proc";
  // What happens to an allocation above its memory quota by ground truth for
  // longer than the grace, or running kernels without leases: its youngest
  // offending process is killed, or it is only logged and counted.
  OverQuotaAction over_quota = OverQuotaAction::kKill;
  std::uint64_t over_quota_grace_ns = 2'000'000'000;
};

class Daemon {
 public:
  explicit Daemon(DaemonConfig config);
  ~Daemon();

  // Runs until `stop` becomes true (checked at least every poll interval).
  void run(const std::atomic<bool>& stop);
  // One iteration (tests drive it directly). `events_may_wait`: false when
  // the loop's poll() found no inotify event since the last tick.
  void tick(std::uint64_t now, bool events_may_wait = true);

  // The figures of the last publish (never null), immutable: the metrics
  // thread renders them without holding anything the loop waits for.
  std::shared_ptr<const MetricsSnapshot> metrics() const;
  // CLOCK_MONOTONIC of the end of the last tick (0 before the first); thread-safe.
  std::uint64_t last_tick_ns() const { return last_tick_ns_.load(std::memory_order_relaxed); }
  const DaemonConfig& config() const { return config_; }

 private:
  struct TenantRef {
    std::string alloc_id;
    unsigned gpu = 0;
    std::string uuid;  // of its limits entry: a GPU's, or shm::kAnyGpu
    // The GPU whose scheduler arbitrates it: the entry's UUID, or for a "*"
    // entry the GPU NVML shows its processes on (empty until known).
    std::string gpu_key;
    TenantId id = 0;
    TenantPolicy policy;
    // Counters published before this daemon instance (restart) or before
    // the tenant last left the scheduler (a new TenantStats::incarnation):
    // added so they never go backwards.
    std::uint64_t base_busy_ns = 0, base_grants = 0, base_granted_ns = 0, base_handoffs = 0;
    std::uint64_t last_attributed_ns = 0, last_grants = 0, last_granted_ns = 0, last_handoffs = 0;
    std::uint64_t base_unleased_ns = 0, last_unleased_ns = 0;
    std::uint64_t stats_incarnation = 0;
    // What was published last: a refund takes charged time back and a cut
    // takes granted time back, but a published counter only grows.
    std::uint64_t published_busy_ns = 0, published_granted_ns = 0;
    // Ground truth: the scheduler's recent charges (read over the stretch
    // NVML's samples cover), and the balance of what NVML saw against them.
    ChargeHistory charges;
    BusyBalance busy;
    LeaseBusyRatio lease_busy;
    // When the daemon last woke its threads for a ready window.
    std::uint64_t ready_woken_ns = 0;
  };
  // What the daemon knows of an allocation beyond its regions.
  struct AllocationState {
    AllocationProcesses processes;            // verified by the daemon itself
    std::map<unsigned, LedgerCheck> ledgers;  // per limits entry
    std::map<unsigned, MemoryWatch> memory;   // per limits entry
    bool wants_verification = false;          // demand seen before any verified process
  };
  void on_added(Allocation& a, std::uint64_t now);
  void on_removed(const std::string& alloc_id, std::uint64_t now);
  void sync_tenants(std::uint64_t now);
  void housekeeping(std::uint64_t now);
  void repair_ledgers(Allocation& a, AllocationState& st);
  void ground_truth(std::uint64_t now);
  void record_charges(std::uint64_t now);
  struct GpuProcesses {  // what NVML says of one GPU's processes
    std::string uuid;
    std::map<std::uint32_t, std::uint64_t> memory, busy;  // host PID -> bytes / ns
    Stretch busy_stretch;                                 // what `busy` covers
    bool memory_ok = false, busy_ok = false;
    bool busy_tiles = false;  // NvmlReader::ProcessBusy::samples_tile
  };
  std::map<std::string, std::vector<VerifiedProcess>> unslotted_processes(
      const std::vector<GpuProcesses>& gpus);
  void kill_process(Allocation& a, unsigned entry, const ProcessUse& victim,
                    const std::string& why);
  void publish_lease(const std::string& uuid, const LeaseDecision& d);
  void publish_ready(const std::string& uuid, const LeaseDecision& d, std::uint64_t now);
  static void clear_ready(shm::LimitsRegion& l);
  // Per GPU: the tenant last told that a grant is near, and until when.
  struct ReadyWord {
    TenantId id = 0;  // 0: none
    std::uint64_t until_ns = 0;
  };
  std::map<std::string, ReadyWord> ready_;
  // Whether the host has a CPU to spare for a thread that waits for its
  // grant on the CPU (read each housekeeping pass).
  SpareCpu spare_cpu_;
  void read_spare_cpu();
  void publish_figures(std::uint64_t now);
  void heartbeat(std::uint64_t now);
  LeaseScheduler& scheduler_for(const std::string& uuid);
  // The scheduler of the tenant's GPU; null while a "*" entry's GPU is not known.
  LeaseScheduler* scheduler_of(const TenantRef& ref);
  void resolve_any_gpu(const std::vector<GpuProcesses>& gpus, std::uint64_t now);
  TenantRef* tenant(TenantId id);

  DaemonConfig config_;
  AllocationRegistry registry_;
  NvmlReader nvml_;
  std::map<std::string, std::unique_ptr<LeaseScheduler>> schedulers_;  // by GPU UUID
  // The lease length last logged per GPU, and when (note_lease_length).
  struct LeaseLengthLog {
    std::uint64_t length_ns = 0, logged_ns = 0;
  };
  std::map<std::string, LeaseLengthLog> lease_length_log_;
  void note_lease_length(const std::string& uuid, const LeaseScheduler& sched, std::uint64_t now);
  std::map<std::pair<std::string, unsigned>, TenantId> tenant_ids_;
  std::map<TenantId, TenantRef> tenants_;
  std::map<std::string, AllocationState> states_;  // by allocation id
  TenantId next_tenant_id_ = 1;
  std::uint64_t next_housekeeping_ns_ = 0;
  std::uint64_t next_nvml_ns_ = 0;
  std::uint64_t next_figures_ns_ = 0;
  // Metrics labels: each GPU's NVML index (learnt with ground truth) and each
  // allocation's pod (re-read every second from the plugin's files).
  std::vector<tools::GpuInfo> gpus_;
  std::map<std::string, shm::PodIdentity> identities_;
  std::uint64_t next_identities_ns_ = 0;
  std::uint64_t next_step_ns_ = 0;
  std::uint64_t reclaimed_slots_ = 0;
  std::uint64_t reclaimed_bytes_ = 0;
  std::uint64_t ledger_repairs_ = 0;
  std::uint64_t over_quota_kills_ = 0;
  std::uint64_t next_charge_mark_ns_ = 0;
  bool any_active_ = false;
  std::atomic<std::uint64_t> last_tick_ns_{0};
  // Published in every heartbeat; read once (glibc does not cache getpid()).
  const std::uint32_t pid_ = static_cast<std::uint32_t>(getpid());
  mutable std::mutex metrics_mutex_;
  std::shared_ptr<const MetricsSnapshot> metrics_ = std::make_shared<const MetricsSnapshot>();
};

}  // namespace cushare::sched
