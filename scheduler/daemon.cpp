#include "scheduler/daemon.hpp"

#include <linux/futex.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

#include "scheduler/host_pids.hpp"
#include "shm/limits_seqlock.hpp"
#include "shm/process_slots.hpp"
#include "shm/quota_ledger.hpp"

namespace cushare::sched {
namespace {

void futex_wake_all(std::atomic<std::uint32_t>& word) {
  // Shared (not FUTEX_PRIVATE): the waiters are shims in other processes that
  // map the same file read-only.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

TenantPolicy policy_of(const shm::GpuLimitsSnapshot& s) {
  return {.weight = std::max<std::uint32_t>(s.weight, 1),
          .limit_pct = std::clamp<std::uint32_t>(s.compute_limit_pct, 1, 100),
          .mode = s.mode == shm::ComputeMode::kCapped ? Mode::kCapped : Mode::kBurst};
}

bool same_policy(const TenantPolicy& a, const TenantPolicy& b) {
  return a.weight == b.weight && a.limit_pct == b.limit_pct && a.mode == b.mode;
}

}  // namespace

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)), registry_(config_.run_dir) {}

Daemon::~Daemon() = default;

LeaseScheduler& Daemon::scheduler_for(const std::string& uuid) {
  auto& s = schedulers_[uuid];
  if (!s) s = std::make_unique<LeaseScheduler>(config_.scheduler);
  return *s;
}

Daemon::TenantRef* Daemon::tenant(TenantId id) {
  auto it = tenants_.find(id);
  return it == tenants_.end() ? nullptr : &it->second;
}

void Daemon::on_added(Allocation& a, std::uint64_t) {
  const auto& limits = a.limits.region();
  const unsigned count = std::min(limits.gpu_count.load(std::memory_order_acquire), shm::kMaxGpus);
  for (unsigned g = 0; g < count; ++g) {
    const std::string uuid(limits.gpus[g].uuid, strnlen(limits.gpus[g].uuid, shm::kUuidBytes));
    if (uuid.empty()) continue;
    const auto key = std::make_pair(a.id, g);
    if (tenant_ids_.contains(key)) continue;
    const TenantId id = next_tenant_id_++;
    tenant_ids_[key] = id;
    TenantRef ref{.alloc_id = a.id, .gpu = g, .uuid = uuid, .id = id};
    const auto& gl = limits.gpus[g];
    ref.base_busy_ns = a.usage.region().gpus[g].busy_ns.load(std::memory_order_relaxed);
    ref.base_grants = gl.lease_grants.load(std::memory_order_relaxed);
    ref.base_granted_ns = gl.granted_ns.load(std::memory_order_relaxed);
    ref.base_handoffs = gl.handoffs.load(std::memory_order_relaxed);
    tenants_.emplace(id, std::move(ref));
  }
}

void Daemon::on_removed(const std::string& alloc_id, std::uint64_t now) {
  for (auto it = tenant_ids_.begin(); it != tenant_ids_.end();) {
    if (it->first.first != alloc_id) {
      ++it;
      continue;
    }
    const TenantId id = it->second;
    if (auto* t = tenant(id)) {
      auto& s = scheduler_for(t->uuid);
      if (s.has_tenant(id)) s.remove_tenant(id, now);
      tenants_.erase(id);
    }
    present_.erase(it->first);
    it = tenant_ids_.erase(it);
  }
}

// Registers tenants with live processes (or threads waiting at the gate),
// removes those whose processes are all gone, and feeds every registered
// tenant's policy and signals to its GPU's scheduler.
void Daemon::sync_tenants(std::uint64_t now) {
  any_active_ = false;
  auto& allocs = registry_.allocations();
  for (auto& [id, ref] : tenants_) {
    auto it = allocs.find(ref.alloc_id);
    if (it == allocs.end()) continue;
    Allocation& a = *it->second;
    auto& gl = a.limits.mutable_region().gpus[ref.gpu];
    const auto& gu = a.usage.region().gpus[ref.gpu];
    auto& sched = scheduler_for(ref.uuid);
    const TenantSignals signals{
        .waiting = gu.demand.load(std::memory_order_acquire),
        .last_submit_ns = gu.last_submit_ns.load(std::memory_order_acquire),
        .drained_ns = gu.drained_ns.load(std::memory_order_acquire),
        .expected_drain_ns = gu.expected_drain_ns.load(std::memory_order_acquire),
        .busy_processes = gu.busy_processes.load(std::memory_order_acquire),
        .resumed_ns = gu.resumed_ns.load(std::memory_order_acquire)};
    // A thread waiting at the gate proves a live process until the next
    // housekeeping pass says otherwise (its slot may be younger than the
    // last pass).
    bool& known_present = present_[{ref.alloc_id, ref.gpu}];
    if (signals.waiting > 0) known_present = true;
    const bool present = known_present;
    if (present) {
      const TenantPolicy policy = policy_of(shm::read_gpu_limits(a.limits.region(), ref.gpu));
      if (!sched.has_tenant(id) || !same_policy(policy, ref.policy)) {
        const bool first = !sched.has_tenant(id);
        sched.set_tenant(id, policy, now);
        ref.policy = policy;
        if (first) {
          spdlog::info("tenant {} gpu {} ({}): weight {} limit {}% {}", ref.alloc_id, ref.gpu,
                       ref.uuid, policy.weight, policy.limit_pct,
                       policy.mode == Mode::kCapped ? "capped" : "burst");
          // A lease granted by a previous daemon instance runs on.
          const std::uint64_t expiry = gl.lease_expiry_ns.load(std::memory_order_acquire);
          if (gl.lease_holder.load(std::memory_order_acquire) == 1 && expiry > now) {
            sched.set_signals(id, signals);
            sched.adopt_lease(id, expiry, now);
          }
        }
      }
      sched.set_signals(id, signals);
      any_active_ = any_active_ || signals.waiting > 0 || sched.holder() == id;
    } else if (sched.has_tenant(id)) {
      spdlog::info("tenant {} gpu {}: no live process, leaving the scheduler", ref.alloc_id,
                   ref.gpu);
      sched.remove_tenant(id, now);
    }
  }
}

void Daemon::publish_lease(const std::string& uuid, const LeaseDecision& d) {
  auto& allocs = registry_.allocations();
  auto words = [&](TenantId id) -> shm::GpuLimits* {
    TenantRef* t = tenant(id);
    if (!t) return nullptr;
    auto it = allocs.find(t->alloc_id);
    if (it == allocs.end()) return nullptr;
    return &it->second->limits.mutable_region().gpus[t->gpu];
  };
  if (d.revoked) {
    if (shm::GpuLimits* g = words(*d.revoked)) {
      g->lease_holder.store(0, std::memory_order_relaxed);
      g->lease_expiry_ns.store(0, std::memory_order_release);
      g->lease_futex.fetch_add(1, std::memory_order_release);
      futex_wake_all(g->lease_futex);
    }
  }
  if (d.holder && d.changed) {
    if (shm::GpuLimits* g = words(*d.holder)) {
      g->lease_holder.store(1, std::memory_order_relaxed);
      g->lease_expiry_ns.store(d.expiry_ns, std::memory_order_release);
      g->lease_futex.fetch_add(1, std::memory_order_release);
      futex_wake_all(g->lease_futex);
    }
  }
  (void)uuid;
}

void Daemon::heartbeat(std::uint64_t now) {
  const auto pid = static_cast<std::uint32_t>(getpid());
  for (auto& [id, a] : registry_.allocations()) {
    auto& l = a->limits.mutable_region();
    l.daemon_pid.store(pid, std::memory_order_relaxed);
    l.quantum_ns.store(config_.scheduler.quantum_ns, std::memory_order_relaxed);
    l.daemon_heartbeat_ns.store(now, std::memory_order_release);
  }
}

void Daemon::housekeeping(std::uint64_t now) {
  std::optional<HostPidTable> table;
  std::uint64_t scan_ns = 0;
  const auto checker = shm::LivenessChecker::host(config_.proc_root);
  for (auto& [alloc_id, a] : registry_.allocations()) {
    auto& usage = a->usage.mutable_region();
    // Host PIDs first: liveness is judged by them.
    for (unsigned i = 0; i < shm::kMaxSlots; ++i) {
      auto& slot = usage.slots[i];
      if (shm::slot_state(slot) != shm::SlotState::kActive) continue;
      const auto ident = shm::read_identity(slot);
      if (ident.host_pid != 0 || ident.pid == 0) continue;
      if (!table) {
        scan_ns = monotonic_ns();
        table = HostPidTable::scan(config_.proc_root);
      }
      if (auto host = table->find({ident.pidns_inode, ident.pid, ident.start_time})) {
        slot.host_pid.store(*host, std::memory_order_release);
      } else if (table->sees_namespace(ident.pidns_inode) &&
                 slot.heartbeat_ns.load(std::memory_order_acquire) < scan_ns) {
        // Its namespace is visible but the process is not: it died before
        // we ever mapped it.
        if (auto bytes = shm::reclaim_slot(usage, i, shm::SlotState::kActive)) {
          reclaimed_slots_ += 1;
          reclaimed_bytes_ += *bytes;
          spdlog::info("allocation {}: reclaimed the slot of pid {} (died unmapped), {} bytes",
                       alloc_id, ident.pid, *bytes);
        }
      }
    }
    const auto result = shm::reclaim_dead_slots(usage, checker);
    if (result.slots > 0) {
      reclaimed_slots_ += result.slots;
      reclaimed_bytes_ += result.bytes;
      spdlog::info("allocation {}: reclaimed {} slot(s) of dead processes, {} bytes", alloc_id,
                   result.slots, result.bytes);
    }
    unsigned live = 0;
    for (const auto& slot : usage.slots) {
      const auto st = shm::slot_state(slot);
      if (st == shm::SlotState::kActive || st == shm::SlotState::kClaiming) ++live;
    }
    const unsigned count =
        std::min(a->limits.region().gpu_count.load(std::memory_order_acquire), shm::kMaxGpus);
    for (unsigned g = 0; g < count; ++g) {
      present_[{alloc_id, g}] = live > 0;
      if (live == 0) {
        // Nobody left to publish drain marks: whatever was in flight died
        // with its context.
        auto& gu = usage.gpus[g];
        const auto submitted = gu.last_submit_ns.load(std::memory_order_acquire);
        if (gu.drained_ns.load(std::memory_order_acquire) < submitted) {
          gu.drained_ns.store(std::max(submitted, now), std::memory_order_release);
        }
        gu.busy_processes.store(0, std::memory_order_release);
      }
    }
  }
}

void Daemon::reconcile_overhead() {
  if (!nvml_.available()) return;
  std::map<std::string, std::map<std::uint32_t, std::uint64_t>> by_uuid;
  for (auto& [id, ref] : tenants_) {
    if (!by_uuid.contains(ref.uuid)) {
      auto m = nvml_.process_memory(ref.uuid);
      if (!m) continue;
      by_uuid[ref.uuid] = std::move(*m);
    }
  }
  for (auto& [id, ref] : tenants_) {
    auto procs = by_uuid.find(ref.uuid);
    if (procs == by_uuid.end()) continue;
    auto it = registry_.allocations().find(ref.alloc_id);
    if (it == registry_.allocations().end()) continue;
    auto& usage = it->second->usage.mutable_region();
    shm::QuotaLedger ledger(usage);
    for (auto& slot : usage.slots) {
      if (shm::slot_state(slot) != shm::SlotState::kActive) continue;
      const auto host = slot.host_pid.load(std::memory_order_acquire);
      auto used = procs->second.find(host);
      if (host == 0 || used == procs->second.end()) continue;
      const std::uint64_t tracked = slot.bytes[ref.gpu].load(std::memory_order_relaxed);
      const std::uint64_t overhead = measured_overhead(used->second, tracked);
      const std::uint64_t current = slot.overhead[ref.gpu].load(std::memory_order_relaxed);
      // Allocations racing the NVML sample move it by whole allocations;
      // ignore sub-MiB jitter so the total does not flap.
      const std::uint64_t diff = overhead > current ? overhead - current : current - overhead;
      if (diff >= (1u << 20)) ledger.set_overhead(ref.gpu, slot, overhead);
    }
  }
}

void Daemon::publish_figures(std::uint64_t) {
  DaemonMetrics m;
  auto& allocs = registry_.allocations();
  m.allocations = allocs.size();
  m.reclaimed_slots_total = reclaimed_slots_;
  m.reclaimed_bytes_total = reclaimed_bytes_;
  for (auto& [id, ref] : tenants_) {
    auto it = allocs.find(ref.alloc_id);
    if (it == allocs.end()) continue;
    auto& gl = it->second->limits.mutable_region().gpus[ref.gpu];
    auto& usage = it->second->usage.mutable_region();
    auto& gu = usage.gpus[ref.gpu];
    const TenantStats st = scheduler_for(ref.uuid).stats(id);
    // Stats restart from zero when a tenant leaves and comes back: keep the
    // published counters monotonic by folding the old run into the base.
    if (st.attributed_ns < ref.last_attributed_ns) {
      ref.base_busy_ns += ref.last_attributed_ns;
      ref.base_grants += ref.last_grants;
      ref.base_granted_ns += ref.last_granted_ns;
      ref.base_handoffs += ref.last_handoffs;
    }
    ref.last_attributed_ns = st.attributed_ns;
    ref.last_grants = st.grants;
    ref.last_granted_ns = st.granted_ns;
    ref.last_handoffs = st.handoffs;
    gl.share_target_ppm.store(st.target_ppm, std::memory_order_relaxed);
    gl.share_achieved_ppm.store(st.achieved_ppm, std::memory_order_relaxed);
    gl.handoffs.store(ref.base_handoffs + st.handoffs, std::memory_order_relaxed);
    gl.lease_grants.store(ref.base_grants + st.grants, std::memory_order_relaxed);
    gl.granted_ns.store(ref.base_granted_ns + st.granted_ns, std::memory_order_relaxed);
    gu.busy_ns.store(ref.base_busy_ns + st.attributed_ns, std::memory_order_relaxed);

    const auto lim = shm::read_gpu_limits(it->second->limits.region(), ref.gpu);
    TenantMetrics t;
    t.allocation = ref.alloc_id;
    t.gpu_uuid = ref.uuid;
    t.gpu_index = ref.gpu;
    t.mode = lim.mode == shm::ComputeMode::kCapped ? "capped" : "burst";
    t.compute_limit_pct = lim.compute_limit_pct;
    t.weight = lim.weight;
    t.memory_used_bytes = gu.used_bytes.load(std::memory_order_relaxed);
    t.memory_quota_bytes = lim.memory_limit_bytes;
    t.gpu_time_ns = ref.base_busy_ns + st.attributed_ns;
    t.share_target_ppm = st.target_ppm;
    t.share_achieved_ppm = st.achieved_ppm;
    t.throttled_ns = gu.throttled_ns.load(std::memory_order_relaxed);
    t.throttled_launches = gu.throttled_launches.load(std::memory_order_relaxed);
    t.launches = gu.launches.load(std::memory_order_relaxed);
    t.lease_grants = ref.base_grants + st.grants;
    t.lease_handoffs = ref.base_handoffs + st.handoffs;
    t.oom_refusals = gu.oom_refusals.load(std::memory_order_relaxed);
    for (const auto& slot : usage.slots) {
      if (shm::slot_state(slot) == shm::SlotState::kActive) ++t.processes;
    }
    m.tenants.push_back(std::move(t));
  }
  std::lock_guard lock(metrics_mutex_);
  metrics_ = std::move(m);
}

DaemonMetrics Daemon::metrics() const {
  std::lock_guard lock(metrics_mutex_);
  return metrics_;
}

void Daemon::tick(std::uint64_t now) {
  const auto changes = registry_.poll(now);
  for (const auto& id : changes.removed) on_removed(id, now);
  for (const auto& id : changes.added) {
    on_added(*registry_.allocations().at(id), now);
    next_housekeeping_ns_ = 0;  // learn its processes at once
  }
  if (now >= next_housekeeping_ns_) {
    housekeeping(now);
    next_housekeeping_ns_ = now + config_.housekeeping_interval_ns;
  }
  heartbeat(now);
  sync_tenants(now);
  next_step_ns_ = UINT64_MAX;
  for (auto& [uuid, sched] : schedulers_) {
    const LeaseDecision d = sched->step(now);
    if (d.changed || d.revoked) publish_lease(uuid, d);
    next_step_ns_ = std::min(next_step_ns_, d.next_step_ns);
  }
  if (now >= next_nvml_ns_) {
    reconcile_overhead();
    next_nvml_ns_ = now + config_.nvml_interval_ns;
  }
  if (now >= next_figures_ns_) {
    publish_figures(now);
    next_figures_ns_ = now + 100'000'000;
  }
}

void Daemon::run(const std::atomic<bool>& stop) {
  spdlog::info("cushared: run dir {}, quantum {} ms", config_.run_dir.string(),
               config_.scheduler.quantum_ns / 1e6);
  while (!stop.load(std::memory_order_relaxed)) {
    const std::uint64_t now = monotonic_ns();
    tick(now);
    // Sleep until the schedulers need us or the next poll of the demand
    // words; wake early when allocations appear (inotify). Never spin.
    const std::uint64_t interval =
        any_active_ ? config_.poll_interval_ns : config_.idle_poll_interval_ns;
    const std::uint64_t wake = std::min(next_step_ns_, now + interval);
    const std::uint64_t after = monotonic_ns();
    const std::uint64_t wait_ns = wake > after ? wake - after : 0;
    timespec ts{.tv_sec = static_cast<time_t>(wait_ns / 1'000'000'000),
                .tv_nsec = static_cast<long>(wait_ns % 1'000'000'000)};
    pollfd pfd{.fd = registry_.notify_fd(), .events = POLLIN, .revents = 0};
    ppoll(&pfd, pfd.fd >= 0 ? 1 : 0, &ts, nullptr);
  }
  publish_figures(monotonic_ns());
}

}  // namespace cushare::sched
