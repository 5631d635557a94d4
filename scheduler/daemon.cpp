#include "scheduler/daemon.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <stop_token>
#include <thread>

#include "node/pod_identity_file.hpp"
#include "scheduler/host_pids.hpp"
#include "shm/clock.hpp"
#include "shm/futex.hpp"
#include "shm/limits_seqlock.hpp"
#include "shm/process_slots.hpp"
#include "shm/quota_ledger.hpp"

namespace cushare::sched {
namespace {

TenantPolicy policy_of(const shm::GpuLimitsSnapshot& s) {
  return {.weight = std::max<std::uint32_t>(s.weight, 1),
          .limit_pct = std::clamp<std::uint32_t>(s.compute_limit_pct, 1, 100),
          .mode = s.mode == shm::ComputeMode::kCapped ? Mode::kCapped : Mode::kBurst};
}

// Demand seen in an allocation with no verified process brings the next
// housekeeping pass this close (its process may just have started).
constexpr std::uint64_t kEarlyHousekeepingNs = 10'000'000;

bool same_policy(const TenantPolicy& a, const TenantPolicy& b) {
  return a.weight == b.weight && a.limit_pct == b.limit_pct && a.mode == b.mode;
}

}  // namespace

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)), registry_(config_.run_dir) {}

Daemon::~Daemon() = default;

LeaseScheduler* Daemon::scheduler_of(const TenantRef& ref) {
  return ref.gpu_key.empty() ? nullptr : &scheduler_for(ref.gpu_key);
}

// A "*" entry's tenant is arbitrated with the other tenants of the GPU NVML
// shows its processes on (the first such GPU, should they use several; the
// ground-truth backstop charges its time on the others). Moving it takes it
// out of the old GPU's scheduler; sync_tenants adds it to the new one.
void Daemon::resolve_any_gpu(const std::vector<GpuProcesses>& gpus, std::uint64_t now) {
  for (auto& [id, ref] : tenants_) {
    if (ref.uuid != shm::kAnyGpu || gpus.empty()) continue;
    const AllocationState& st = states_[ref.alloc_id];
    std::string found;
    for (const auto& gpu : gpus) {
      for (const auto& [slot, p] : st.processes.verified()) {
        if (gpu.memory.contains(p.host_pid)) found = gpu.uuid;
      }
      if (!found.empty()) break;
    }
    if (found.empty() || found == ref.gpu_key) continue;
    if (LeaseScheduler* old = scheduler_of(ref); old && old->has_tenant(id))
      old->remove_tenant(id, now);
    spdlog::info("allocation {} gpu {} ('*'): its processes run on {}", ref.alloc_id, ref.gpu,
                 found);
    ref.gpu_key = found;
  }
}

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
  clear_ready(a.limits.mutable_region());
  const auto& limits = a.limits.region();
  const unsigned count = std::min(limits.gpu_count.load(std::memory_order_acquire), shm::kMaxGpus);
  for (unsigned g = 0; g < count; ++g) {
    const std::string uuid(limits.gpus[g].uuid, strnlen(limits.gpus[g].uuid, shm::kUuidBytes));
    if (uuid.empty()) continue;
    const auto key = std::make_pair(a.id, g);
    if (tenant_ids_.contains(key)) continue;
    const TenantId id = next_tenant_id_++;
    tenant_ids_[key] = id;
    TenantRef ref{.alloc_id = a.id, .gpu = g, .uuid = uuid, .gpu_key = uuid, .id = id};
    if (uuid == shm::kAnyGpu) {
      // Any GPU the container sees: arbitrated on the GPU its processes use
      // (resolve_any_gpu). A node with one GPU has only that one; without
      // NVML nothing says which, and the entry gets a scheduler of its own.
      ref.gpu_key.clear();
      const auto gpus = nvml_.available() ? nvml_.gpu_uuids() : std::vector<std::string>{};
      if (gpus.size() == 1) ref.gpu_key = gpus.front();
      if (!nvml_.available()) {
        ref.gpu_key = uuid;
        spdlog::warn(
            "allocation {} gpu {}: limits entry '*' without NVML: it cannot be "
            "placed on a GPU and is arbitrated on its own",
            a.id, g);
      }
    }
    const auto& gl = limits.gpus[g];
    ref.base_unleased_ns = gl.unleased_busy_ns.load(std::memory_order_relaxed);
    ref.base_grants = gl.lease_grants.load(std::memory_order_relaxed);
    ref.base_granted_ns = gl.granted_ns.load(std::memory_order_relaxed);
    ref.base_handoffs = gl.handoffs.load(std::memory_order_relaxed);
    if (const shm::UsageRegion* u = a.usage_region()) {
      ref.base_busy_ns = carried_busy_ns(u->gpus[g].busy_ns.load(std::memory_order_relaxed),
                                         {.granted_ns = ref.base_granted_ns,
                                          .grants = ref.base_grants,
                                          .unleased_ns = ref.base_unleased_ns},
                                         config_.scheduler.drain_bound_ns);
    }
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
      if (LeaseScheduler* s = scheduler_of(*t); s && s->has_tenant(id)) s->remove_tenant(id, now);
      tenants_.erase(id);
    }
    it = tenant_ids_.erase(it);
  }
  states_.erase(alloc_id);
}

// Registers tenants with live processes, removes those whose processes are
// all gone, and feeds every registered tenant's policy and signals to its
// GPU's scheduler. Live means verified by the daemon (process_verifier.hpp):
// demand in a usage region without a verified process is the tenant's word
// alone and is ignored, except that it makes the next housekeeping pass come
// early.
void Daemon::sync_tenants(std::uint64_t now) {
  any_active_ = false;
  auto& allocs = registry_.allocations();
  for (auto& [id, ref] : tenants_) {
    auto it = allocs.find(ref.alloc_id);
    if (it == allocs.end()) continue;
    Allocation& a = *it->second;
    auto& gl = a.limits.mutable_region().gpus[ref.gpu];
    AllocationState& st = states_[ref.alloc_id];
    if (ref.gpu_key.empty()) {
      // A "*" entry whose GPU is not known yet gets no lease; demand makes
      // the next NVML pass come at once.
      const shm::UsageRegion* u = a.usage_region();
      if (u && u->gpus[ref.gpu].demand.load(std::memory_order_relaxed) > 0 &&
          st.processes.live() > 0) {
        next_nvml_ns_ = std::min(next_nvml_ns_, now + kEarlyHousekeepingNs);
      }
      continue;
    }
    auto& sched = scheduler_for(ref.gpu_key);
    const shm::UsageRegion* usage = a.usage_region();
    const bool present = usage && st.processes.live() > 0;
    if (!present) {
      if (usage && usage->gpus[ref.gpu].demand.load(std::memory_order_relaxed) > 0 &&
          !st.wants_verification) {
        st.wants_verification = true;
        next_housekeeping_ns_ = std::min(next_housekeeping_ns_, now + kEarlyHousekeepingNs);
      }
      if (sched.has_tenant(id)) {
        spdlog::info("tenant {} gpu {}: {}, leaving the scheduler", ref.alloc_id, ref.gpu,
                     usage ? "no live process" : "its usage region is not valid");
        sched.remove_tenant(id, now);
      }
      continue;
    }
    const auto& gu = usage->gpus[ref.gpu];
    const TenantSignals signals{
        .waiting = gu.demand.load(std::memory_order_acquire),
        .last_submit_ns = gu.last_submit_ns.load(std::memory_order_acquire),
        .drained_ns = gu.drained_ns.load(std::memory_order_acquire),
        .expected_drain_ns = gu.expected_drain_ns.load(std::memory_order_acquire),
        .busy_processes = gu.busy_processes.load(std::memory_order_acquire),
        .resumed_ns = gu.resumed_ns.load(std::memory_order_acquire),
        .idle_ns = gu.idle_ns.load(std::memory_order_acquire),
        .per_launch_ns = std::uint64_t{gu.per_launch_us.load(std::memory_order_relaxed)} * 1000};
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
      shm::futex_wake_all(g->lease_futex);
    }
  }
  if (d.holder && d.changed) {
    if (shm::GpuLimits* g = words(*d.holder)) {
      g->lease_holder.store(1, std::memory_order_relaxed);
      const std::uint64_t word =
          d.cut ? d.expiry_ns | shm::kLeaseCutBit : d.expiry_ns & ~shm::kLeaseCutBit;
      g->lease_expiry_ns.store(word, std::memory_order_release);
      g->lease_futex.fetch_add(1, std::memory_order_release);
      shm::futex_wake_all(g->lease_futex);
    }
  }
  (void)uuid;
}

// Tells the tenant the next grant most likely goes to that it is near, so
// that its threads waiting at the gate wait for it on the CPU, and wakes
// those asleep when the word is news to them. The word of a tenant no longer
// named loses this GPU's bit.
void Daemon::publish_ready(const std::string& uuid, const LeaseDecision& d, std::uint64_t now) {
  ReadyWord& last = ready_[uuid];
  auto limits_of = [&](TenantId id, unsigned& entry) -> shm::LimitsRegion* {
    const TenantRef* t = tenant(id);
    if (!t || t->gpu >= shm::kMaxGpus) return nullptr;
    auto it = registry_.allocations().find(t->alloc_id);
    if (it == registry_.allocations().end()) return nullptr;
    entry = t->gpu;
    return &it->second->limits.mutable_region();
  };
  const bool spare = spare_cpu_.enough();
  std::optional<TenantId> name = spare ? d.ready : std::nullopt;
  std::uint64_t until = d.ready_until_ns;
  // A tenant named stays named until its window ends, it is granted or
  // another one is named: the prediction rests on words sampled each step
  // that flicker (a holder's thread at its gate or not), and naming it again
  // would wake its threads again.
  if (!name && spare && last.id != 0 && now < last.until_ns && d.holder != last.id) {
    name = last.id;
    until = last.until_ns;
  }
  unsigned entry = 0;
  if (last.id != 0 && name != last.id) {
    if (shm::LimitsRegion* l = limits_of(last.id, entry))
      l->ready_gpus.fetch_and(~(1u << entry), std::memory_order_release);
    last = {};
  }
  if (!name) return;
  shm::LimitsRegion* l = limits_of(*name, entry);
  TenantRef* ref = tenant(*name);
  if (!l || !ref) return;
  if (last.until_ns != until) l->ready_until_ns.store(until, std::memory_order_relaxed);
  // One window per allocation: a bit of another GPU's goes.
  if (last.id != *name) l->ready_gpus.store(1u << entry, std::memory_order_release);
  // Threads asleep at the gate are woken onto the CPU when the word is news
  // to them, at most once per ready_ahead (a prediction the tenants' words
  // move back and forth must not keep waking them).
  const bool news = last.id != *name || last.until_ns < now;
  if (news && now >= ref->ready_woken_ns + config_.scheduler.ready_ahead_ns) {
    shm::GpuLimits& g = l->gpus[entry];
    g.lease_futex.fetch_add(1, std::memory_order_release);
    shm::futex_wake_all(g.lease_futex);
    ref->ready_woken_ns = now;
  }
  last = {.id = *name, .until_ns = until};
}

// No window of an earlier daemon (or of this one, stopping) outlives it.
void Daemon::clear_ready(shm::LimitsRegion& l) {
  l.ready_gpus.store(0, std::memory_order_release);
  l.ready_until_ns.store(0, std::memory_order_relaxed);
}

void Daemon::heartbeat(std::uint64_t now) {
  for (auto& [id, a] : registry_.allocations()) {
    auto& l = a->limits.mutable_region();
    l.daemon_pid.store(pid_, std::memory_order_relaxed);
    l.quantum_ns.store(config_.scheduler.quantum_ns, std::memory_order_relaxed);
    l.daemon_heartbeat_ns.store(now, std::memory_order_release);
  }
}

void Daemon::read_spare_cpu() {
  std::ifstream in(config_.proc_root + "/stat");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const bool before = spare_cpu_.enough();
  if (const auto t = parse_proc_stat(text)) spare_cpu_.observe(*t);
  if (spare_cpu_.enough() != before)
    spdlog::debug("{:.2f} CPUs idle: the next holders {} for their grants on the CPU",
                  spare_cpu_.cpus(), spare_cpu_.enough() ? "wait" : "no longer wait");
}

void Daemon::housekeeping(std::uint64_t now) {
  read_spare_cpu();
  ProcHost host(config_.proc_root);
  const auto checker = shm::LivenessChecker::host(config_.proc_root);
  for (auto& [alloc_id, a] : registry_.allocations()) {
    AllocationState& st = states_[alloc_id];
    st.wants_verification = false;
    shm::UsageRegion* usage_ptr = a->usage_region();
    if (!usage_ptr) {
      st.processes.reset();
      continue;
    }
    shm::UsageRegion& usage = *usage_ptr;
    const auto& file = a->usage->file();
    const auto verdicts = st.processes.refresh(usage, file.dev, file.ino, host, now);
    for (const auto& [index, verdict] : verdicts) {
      if (verdict != SlotVerdict::kDead) continue;
      const auto ident = shm::read_identity(usage.slots[index]);
      if (auto bytes = shm::reclaim_slot(usage, index, shm::SlotState::kActive)) {
        reclaimed_slots_ += 1;
        reclaimed_bytes_ += *bytes;
        spdlog::info(
            "allocation {}: reclaimed the slot of pid {} (no such process of the "
            "allocation), {} bytes",
            alloc_id, ident.pid, *bytes);
      }
    }
    // Verified slots carry their host PID now (refresh wrote it): the
    // liveness checker finds the ones that died since.
    const auto result = shm::reclaim_dead_slots(usage, checker);
    if (result.slots > 0) {
      reclaimed_slots_ += result.slots;
      reclaimed_bytes_ += result.bytes;
      spdlog::info("allocation {}: reclaimed {} slot(s) of dead processes, {} bytes", alloc_id,
                   result.slots, result.bytes);
    }
    const unsigned live = st.processes.live();
    const unsigned count =
        std::min(a->limits.region().gpu_count.load(std::memory_order_acquire), shm::kMaxGpus);
    for (unsigned g = 0; g < count; ++g) {
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
    repair_ledgers(*a, st);
  }
}

void Daemon::repair_ledgers(Allocation& a, AllocationState& st) {
  shm::UsageRegion& usage = *a.usage_region();
  const unsigned count =
      std::min(a.limits.region().gpu_count.load(std::memory_order_acquire), shm::kMaxGpus);
  for (unsigned g = 0; g < count; ++g) {
    auto& used = usage.gpus[g].used_bytes;
    const std::uint64_t seen = used.load(std::memory_order_acquire);
    const std::uint64_t held = slot_total(usage, g);
    if (auto fix = st.ledgers[g].correction(seen, held)) {
      used.fetch_add(*fix, std::memory_order_acq_rel);
      ++ledger_repairs_;
      spdlog::warn(
          "allocation {} gpu {}: its ledger said {} bytes while its live processes hold {}: "
          "repaired (the usage region is written by the allocation's own processes)",
          a.id, g, seen, held);
    }
  }
}

// NVML per-process memory and utilisation, attributed to allocations through
// the processes the daemon verified: overhead reconciliation, the memory
// backstop and the GPU-time backstop. Nothing here is read from a usage
// region except what the shim tracked (to measure the overhead on top).
void Daemon::ground_truth(std::uint64_t now) {
  if (!nvml_.available()) return;
  record_charges(now);
  std::vector<GpuProcesses> gpus;
  const auto uuids = nvml_.gpu_uuids();
  for (unsigned i = 0; i < uuids.size(); ++i) {
    // A GPU NVML stops listing keeps its index: a `gpu` label that changed
    // would start new series.
    const int index = static_cast<int>(i);
    const auto known = std::ranges::find(gpus_, uuids[i], &tools::GpuInfo::uuid);
    if (known != gpus_.end())
      known->index = index;
    else
      gpus_.push_back(tools::GpuInfo{.index = index, .uuid = uuids[i]});
  }
  // Each process's memory calls, marked before the sample: one caught inside
  // a call has NVML's figure and its charges apart by that call.
  std::map<std::pair<std::string, unsigned>, shm::MemoryOpsMark> marks;
  for (auto& [alloc_id, a] : registry_.allocations()) {
    const shm::UsageRegion* usage = a->usage_region();
    if (!usage) continue;
    for (const auto& [slot, p] : states_[alloc_id].processes.verified())
      marks[{alloc_id, slot}] = shm::mark_memory_ops(usage->slots[slot]);
  }
  for (auto& uuid : uuids) {
    GpuProcesses g{.uuid = uuid};
    if (auto m = nvml_.process_memory(uuid)) g.memory = std::move(*m), g.memory_ok = true;
    if (auto b = nvml_.process_busy(uuid)) {
      g.busy = std::move(b->busy_ns);
      g.busy_stretch = {.from_ns = b->from_ns, .to_ns = b->to_ns};
      g.busy_ok = true;
      g.busy_tiles = b->samples_tile;
    }
    gpus.push_back(std::move(g));
  }
  resolve_any_gpu(gpus, now);
  const auto unslotted = unslotted_processes(gpus);
  for (auto& [alloc_id, a] : registry_.allocations()) {
    shm::UsageRegion* usage = a->usage_region();
    if (!usage) continue;
    AllocationState& st = states_[alloc_id];
    const shm::LimitsRegion& limits = a->limits.region();
    const auto own_unslotted = unslotted.find(alloc_id);
    // Per limits entry: ground truth of the whole allocation and of each process.
    struct Entry {
      std::uint64_t memory = 0, busy = 0;
      // The stretch each GPU's figures cover (a '*' entry takes several).
      std::map<std::string, Stretch> busy_stretch;
      bool memory_known = false, busy_known = false;
      bool busy_tiles = true;  // every GPU's samples tile time
      std::vector<ProcessUse> memory_users, busy_users;
      std::map<unsigned, std::uint64_t> slot_memory;  // slot -> NVML bytes
    };
    std::map<unsigned, Entry> entries;
    for (const auto& gpu : gpus) {
      const auto e = shm::find_gpu_entry(limits, gpu.uuid);
      if (!e || *e >= shm::kMaxGpus) continue;
      Entry& entry = entries[*e];
      entry.memory_known = entry.memory_known || gpu.memory_ok;
      entry.busy_known = entry.busy_known || gpu.busy_ok;
      if (gpu.busy_ok) entry.busy_stretch[gpu.uuid] = gpu.busy_stretch;
      entry.busy_tiles = entry.busy_tiles && (!gpu.busy_ok || gpu.busy_tiles);
      for (const auto& [slot, p] : st.processes.verified()) {
        auto m = gpu.memory.find(p.host_pid);
        auto b = gpu.busy.find(p.host_pid);
        const std::uint64_t bytes = m == gpu.memory.end() ? 0 : m->second;
        const std::uint64_t busy = b == gpu.busy.end() ? 0 : b->second;
        entry.memory += bytes;
        entry.busy += busy;
        entry.slot_memory[slot] += bytes;
        entry.memory_users.push_back({p.host_pid, p.start_time, bytes});
        entry.busy_users.push_back({p.host_pid, p.start_time, busy});
      }
      // Processes of its container that never registered (they bypass the
      // shim from their first instruction) count too.
      if (own_unslotted == unslotted.end()) continue;
      for (const auto& p : own_unslotted->second) {
        auto m = gpu.memory.find(p.host_pid);
        auto b = gpu.busy.find(p.host_pid);
        const std::uint64_t bytes = m == gpu.memory.end() ? 0 : m->second;
        const std::uint64_t busy = b == gpu.busy.end() ? 0 : b->second;
        entry.memory += bytes;
        entry.busy += busy;
        entry.memory_users.push_back({p.host_pid, p.start_time, bytes});
        entry.busy_users.push_back({p.host_pid, p.start_time, busy});
      }
    }
    shm::QuotaLedger ledger(*usage);
    for (auto& [e, entry] : entries) {
      // Context and module overhead: what NVML sees beyond what the shim tracked.
      if (entry.memory_known) {
        for (const auto& [slot_index, nvml_bytes] : entry.slot_memory) {
          auto& slot = usage->slots[slot_index];
          if (shm::slot_state(slot) != shm::SlotState::kActive || nvml_bytes == 0) continue;
          const std::uint64_t tracked = slot.bytes[e].load(std::memory_order_acquire);
          const std::uint64_t current = slot.overhead[e].load(std::memory_order_acquire);
          const std::uint64_t overhead = measured_overhead(nvml_bytes, tracked);
          // A call of the process in flight (a charge taken before the driver
          // allocated, memory freed before its charge went) only makes this
          // figure low: lowering waits for a quiet process, raising does not,
          // so counters forged to look busy forever cannot keep a charge down.
          const auto mark = marks.find({alloc_id, slot_index});
          const bool quiet = mark != marks.end() && shm::memory_ops_quiet_since(slot, mark->second);
          if (!quiet && overhead < current) continue;
          // Ignore sub-MiB jitter so the total does not flap. A call that
          // began after the check and moved the overhead wins.
          const std::uint64_t diff = overhead > current ? overhead - current : current - overhead;
          if (diff >= (1u << 20)) ledger.replace_overhead(e, slot, current, overhead);
        }
        const std::uint64_t limit = shm::read_gpu_limits(limits, e).memory_limit_bytes;
        auto [watch, added] = st.memory.try_emplace(e, config_.over_quota_grace_ns);
        const bool was_over = watch->second.over();
        if (watch->second.observe(entry.memory, limit, now)) {
          const std::string why = fmt::format(
              "above its memory quota by ground truth: NVML shows {} bytes for its processes, "
              "quota {} bytes, for more than {} ms",
              entry.memory, limit, config_.over_quota_grace_ns / 1'000'000);
          if (auto victim = youngest_user(entry.memory_users)) kill_process(*a, e, *victim, why);
        } else if (!was_over && watch->second.over()) {
          spdlog::warn(
              "allocation {} gpu {}: NVML shows {} bytes for its processes, above its "
              "quota of {} bytes (the grace is {} ms)",
              alloc_id, e, entry.memory, limit, config_.over_quota_grace_ns / 1'000'000);
        }
      }
      // GPU time: what NVML saw against what the scheduler charged over the
      // same stretch (it ends at NVML's latest sample, not now). The stretch
      // is the one of the GPU whose scheduler charged the tenant; the GPU
      // time of a '*' entry's processes on others is held against it too.
      if (!entry.busy_known) continue;
      auto tid = tenant_ids_.find({alloc_id, e});
      if (tid == tenant_ids_.end()) continue;
      TenantRef* ref = tenant(tid->second);
      if (!ref) continue;
      LeaseScheduler* found = scheduler_of(*ref);
      if (!found) continue;
      LeaseScheduler& sched = *found;
      const auto stretch = judged_stretch(entry.busy_stretch, ref->gpu_key, ref->charges);
      if (!stretch) continue;
      const auto [from, to] = *stretch;
      const std::uint64_t window = to - from;
      const std::int64_t charged = ref->charges.charged(from, to);
      // Only a cap is scaled (a burst tenant's virtual time is not): the
      // scale its charges were held to in this window weighs them.
      const bool capped = ref->policy.mode == Mode::kCapped;
      const double scale = capped ? ref->lease_busy.scale() : 1.0;
      const BusyBalance::Verdict v = ref->busy.observe(entry.busy, charged, window, scale);
      if (v.charge_ns > 0 && sched.has_tenant(ref->id)) sched.charge_unleased(ref->id, v.charge_ns);
      // GPU time NVML reads low would raise a cap: only samples seen to
      // tile time may (an H100 read every 500 ms showed 40 % of the GPU time
      // that ran, and two caps then ran at 1.25 times).
      if (entry.busy_tiles) ref->lease_busy.observe(entry.busy, charged, window);
      if (capped && sched.has_tenant(ref->id))
        sched.set_busy_scale(ref->id, ref->lease_busy.scale());
      spdlog::debug(
          "allocation {} gpu {}: NVML {} us of GPU time in {} us, charged {} us; {} us "
          "charged on top; lease time per GPU time {:.3f}",
          alloc_id, e, entry.busy / 1000, window / 1000, charged / 1000, v.charge_ns / 1000,
          ref->lease_busy.scale());
      if (v.unleased) {
        const std::string why = fmt::format(
            "running kernels without leases: NVML shows {} ms of GPU time in the last {} ms, "
            "its leases {} ms",
            entry.busy / 1'000'000, window / 1'000'000, charged / 1'000'000);
        if (auto victim = youngest_user(entry.busy_users)) kill_process(*a, e, *victim, why);
      }
    }
  }
}

// GPU processes (by NVML) without a verified slot, attributed to the
// allocation whose verified processes share their PID namespace: a container's
// process that never loaded the shim (a private loader, a static binary) still
// belongs to its container. Only container namespaces are used: every process
// of the daemon's own namespace would otherwise be attributed to whichever
// allocation runs there, and a namespace shared by processes of several
// allocations attributes nothing.
std::map<std::string, std::vector<VerifiedProcess>> Daemon::unslotted_processes(
    const std::vector<GpuProcesses>& gpus) {
  std::map<std::uint64_t, std::string> owner;  // pidns inode -> allocation ("" = several)
  std::set<std::uint32_t> verified;
  const auto own_ns = shm::read_pidns_inode(getpid(), config_.proc_root);
  for (const auto& [alloc_id, st] : states_) {
    for (const auto& [slot, p] : st.processes.verified()) {
      verified.insert(p.host_pid);
      const std::uint64_t ns = p.identity.pidns_inode;
      if (own_ns && ns == *own_ns) continue;
      auto [it, added] = owner.try_emplace(ns, alloc_id);
      if (!added && it->second != alloc_id) it->second.clear();
    }
  }
  std::map<std::string, std::vector<VerifiedProcess>> out;
  std::set<std::uint32_t> seen;
  for (const auto& gpu : gpus) {
    for (const auto* table : {&gpu.memory, &gpu.busy}) {
      for (const auto& [pid, amount] : *table) {
        if (verified.contains(pid) || !seen.insert(pid).second) continue;
        const auto ns = shm::read_pidns_inode(static_cast<pid_t>(pid), config_.proc_root);
        const auto stat = shm::read_proc_stat(static_cast<pid_t>(pid), config_.proc_root);
        if (!ns || !stat) continue;
        auto it = owner.find(*ns);
        if (it == owner.end() || it->second.empty()) continue;
        out[it->second].push_back(VerifiedProcess{pid, stat->start_time, {}});
      }
    }
  }
  return out;
}

void Daemon::kill_process(Allocation& a, unsigned entry, const ProcessUse& victim,
                          const std::string& why) {
  const std::uint32_t host_pid = victim.host_pid;
  const std::uint64_t start_time = victim.start_time;
  if (config_.over_quota == OverQuotaAction::kLog) {
    spdlog::error("allocation {} gpu {}: {}; pid {} left running (--over-quota=log)", a.id, entry,
                  why, host_pid);
    return;
  }
  // The record is at most a pass old: make sure the PID still is that
  // process before the signal.
  const auto now_stat = shm::read_proc_stat(static_cast<pid_t>(host_pid), config_.proc_root);
  if (!now_stat || now_stat->start_time != start_time) return;
  if (::kill(static_cast<pid_t>(host_pid), SIGKILL) != 0) {
    spdlog::error("allocation {} gpu {}: {}; cannot kill pid {}: {}", a.id, entry, why, host_pid,
                  std::strerror(errno));
    return;
  }
  ++over_quota_kills_;
  a.limits.mutable_region().gpus[entry].over_quota_kills.fetch_add(1, std::memory_order_relaxed);
  spdlog::error(
      "allocation {} gpu {}: {}; killed pid {}, its youngest such process "
      "(--over-quota=kill)",
      a.id, entry, why, host_pid);
}

// The scheduler's figures go into the regions first; the metrics are then
// the node read model of those regions (what cusharectl reads too) plus what
// only the daemon knows, built here at the figures' cadence because the
// mappings belong to this thread.
void Daemon::publish_figures(std::uint64_t now) {
  auto& allocs = registry_.allocations();
  if (now >= next_identities_ns_) {
    identities_.clear();
    for (const auto& [alloc_id, a] : allocs) {
      if (auto who = tools::read_pod_identity(config_.run_dir, alloc_id))
        identities_[alloc_id] = *who;
    }
    next_identities_ns_ = now + 1'000'000'000;
  }
  auto snapshot = std::make_shared<MetricsSnapshot>();
  DaemonFigures& figures = snapshot->daemon;
  for (auto& [id, ref] : tenants_) {
    auto it = allocs.find(ref.alloc_id);
    if (it == allocs.end()) continue;
    auto& gl = it->second->limits.mutable_region().gpus[ref.gpu];
    shm::UsageRegion* usage = it->second->usage_region();
    const LeaseScheduler* sched = scheduler_of(ref);
    const TenantStats st = sched ? sched->stats(id) : TenantStats{};
    // Stats restart from zero when a tenant leaves and comes back: keep the
    // published counters monotonic by folding the old run into the base.
    // (Not on a decrease alone: a refund lowers attributed_ns, and folding
    // then counted the tenant's time twice, 139 % of the wall time.)
    if (st.incarnation != ref.stats_incarnation) {
      ref.base_busy_ns = std::max(ref.base_busy_ns + ref.last_attributed_ns, ref.published_busy_ns);
      ref.base_grants += ref.last_grants;
      ref.base_granted_ns =
          std::max(ref.base_granted_ns + ref.last_granted_ns, ref.published_granted_ns);
      ref.base_handoffs += ref.last_handoffs;
      ref.base_unleased_ns += ref.last_unleased_ns;
      ref.stats_incarnation = st.incarnation;
    }
    ref.last_attributed_ns = st.attributed_ns;
    ref.last_grants = st.grants;
    ref.last_granted_ns = st.granted_ns;
    ref.last_handoffs = st.handoffs;
    ref.last_unleased_ns = st.unleased_ns;
    ref.published_busy_ns = std::max(ref.published_busy_ns, ref.base_busy_ns + st.attributed_ns);
    ref.published_granted_ns =
        std::max(ref.published_granted_ns, ref.base_granted_ns + st.granted_ns);
    const std::uint64_t busy_ns = ref.published_busy_ns;
    gl.share_target_ppm.store(st.target_ppm, std::memory_order_relaxed);
    gl.share_achieved_ppm.store(st.achieved_ppm, std::memory_order_relaxed);
    gl.handoffs.store(ref.base_handoffs + st.handoffs, std::memory_order_relaxed);
    gl.lease_grants.store(ref.base_grants + st.grants, std::memory_order_relaxed);
    gl.granted_ns.store(ref.published_granted_ns, std::memory_order_relaxed);
    gl.unleased_busy_ns.store(ref.base_unleased_ns + st.unleased_ns, std::memory_order_relaxed);
    if (usage) usage->gpus[ref.gpu].busy_ns.store(busy_ns, std::memory_order_relaxed);

    const auto state = states_.find(ref.alloc_id);
    figures.tenants.push_back(TenantFigures{
        .allocation = ref.alloc_id,
        .entry = ref.gpu,
        .gpu_uuid = ref.gpu_key.empty() ? ref.uuid : ref.gpu_key,
        .processes = state == states_.end() || !usage ? 0 : state->second.processes.live(),
        .gpu_time_ns = busy_ns,
        .busy_scale = ref.policy.mode == Mode::kCapped
                          ? std::optional<double>(ref.lease_busy.scale())
                          : std::nullopt});
  }
  // The heartbeat of this tick is in every region: the read model takes the
  // daemon as up and reads the share figures. The processes the metrics show
  // are the verified ones, so the slot walk (a cache line per slot, 1024 per
  // allocation) stays out of the scheduling loop.
  const tools::Now clocks{.mono_ns = now, .unix_ns = shm::realtime_ns()};
  snapshot->allocations.reserve(allocs.size());
  for (const auto& [alloc_id, a] : allocs) {
    tools::Allocation alloc = tools::allocation_from_regions(
        tools::RegionViews{.limits = &a->limits.region(), .usage = a->usage_region()},
        a->dir.string(), clocks, tools::ProcessSlots::kSkip);
    alloc.id = alloc_id;  // the folder name, as the read model has it on a node
    snapshot->allocations.push_back(std::move(alloc));
  }
  snapshot->gpus = gpus_;
  figures.pods = identities_;
  figures.reclaimed_slots_total = reclaimed_slots_;
  figures.reclaimed_bytes_total = reclaimed_bytes_;
  figures.ledger_repairs_total = ledger_repairs_;
  // Only the swap holds the lock: the previous snapshot is freed after it
  // (or by a scrape still rendering it), never while a scrape waits.
  std::shared_ptr<const MetricsSnapshot> published = std::move(snapshot);
  {
    std::lock_guard lock(metrics_mutex_);
    metrics_.swap(published);
  }
}

std::shared_ptr<const MetricsSnapshot> Daemon::metrics() const {
  std::lock_guard lock(metrics_mutex_);
  return metrics_;
}

// Leases longer than a quantum say that hand-offs are slow on this host:
// logged when the length moves by a quarter, at most every 10 s per GPU.
void Daemon::note_lease_length(const std::string& uuid, const LeaseScheduler& sched,
                               std::uint64_t now) {
  const std::uint64_t length = sched.lease_length_ns();
  LeaseLengthLog& log = lease_length_log_[uuid];
  if (log.length_ns == 0) log.length_ns = sched.config().quantum_ns;
  const std::uint64_t diff =
      length > log.length_ns ? length - log.length_ns : log.length_ns - length;
  if (diff * 4 < log.length_ns || (log.logged_ns != 0 && now < log.logged_ns + 10'000'000'000))
    return;
  spdlog::info("gpu {}: hand-offs cost {:.0f} us of GPU time each, leases now {:.1f} ms", uuid,
               static_cast<double>(sched.handoff_cost_ns()) / 1e3,
               static_cast<double>(length) / 1e6);
  log.length_ns = length;
  log.logged_ns = now;
}

// Each tenant's cumulative charge, kept for a few seconds: ground truth
// reads it over the stretch NVML's samples cover. What ground truth itself
// charged on top is left out: counted as a charge of the next stretch, it
// would be banked against the very excess it settled.
void Daemon::record_charges(std::uint64_t now) {
  next_charge_mark_ns_ = now + ChargeHistory::kSpacingNs;
  if (!nvml_.available()) return;
  for (auto& [id, ref] : tenants_) {
    LeaseScheduler* sched = scheduler_of(ref);
    if (!sched || !sched->has_tenant(id)) continue;
    const TenantStats st = sched->stats(id);
    ref.charges.record(
        now, {.incarnation = st.incarnation, .attributed_ns = st.attributed_ns - st.unleased_ns});
  }
}

void Daemon::tick(std::uint64_t now, bool events_may_wait) {
  const auto changes = registry_.poll(now, events_may_wait);
  for (const auto& id : changes.removed) on_removed(id, now);
  for (const auto& id : changes.added) {
    auto it = registry_.allocations().find(id);
    if (it == registry_.allocations().end()) continue;
    on_added(*it->second, now);
    next_housekeeping_ns_ = 0;  // learn its processes at once
  }
  for (const auto& id : changes.usage_lost) states_[id].processes = AllocationProcesses{};
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
    publish_ready(uuid, d, now);
    next_step_ns_ = std::min(next_step_ns_, d.next_step_ns);
    note_lease_length(uuid, *sched, now);
  }
  if (now >= next_charge_mark_ns_) record_charges(now);
  if (now >= next_nvml_ns_) {
    ground_truth(now);
    next_nvml_ns_ = now + config_.nvml_interval_ns;
  }
  if (now >= next_figures_ns_) {
    publish_figures(now);
    next_figures_ns_ = now + 100'000'000;
  }
  last_tick_ns_.store(now, std::memory_order_relaxed);
}

void Daemon::run(const std::atomic<bool>& stop) {
  spdlog::info("cushared: run dir {}, quantum {} ms", config_.run_dir.string(),
               config_.scheduler.quantum_ns / 1e6);
  // Hand-offs poll for a drain every few tens of microseconds: at normal
  // priority the default 50 us timer slack would double that. (A real-time
  // thread has none.)
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  // NVML's per-process samples, gathered between the ground-truth passes on
  // a thread of their own: the driver keeps only each process's latest.
  std::jthread collector([this](const std::stop_token& stop_collecting) {
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    while (!stop_collecting.stop_requested()) {
      nvml_.collect_all();
      cv.wait_for(lock, stop_collecting, std::chrono::nanoseconds(config_.nvml_collect_interval_ns),
                  [] { return false; });
    }
  });
  bool events_may_wait = true;
  while (!stop.load(std::memory_order_relaxed)) {
    const std::uint64_t now = shm::monotonic_ns();
    tick(now, events_may_wait);
    // Sleep until the schedulers need us or the next poll of the demand
    // words; wake early when allocations appear (inotify). Never spin.
    const std::uint64_t interval =
        any_active_ ? config_.poll_interval_ns : config_.idle_poll_interval_ns;
    std::uint64_t wake = std::min(next_step_ns_, now + interval);
    const std::uint64_t after = shm::monotonic_ns();
    // Right after a rescan the events wait (a tenant writing its folder
    // without pause would wake a real-time thread per write): the loop then
    // looks once they can make one.
    const std::uint64_t heeded = registry_.events_heeded_from();
    const bool watch = registry_.notify_fd() >= 0 && after >= heeded;
    if (!watch && registry_.notify_fd() >= 0) wake = std::min(wake, heeded);
    const std::uint64_t wait_ns = wake > after ? wake - after : 0;
    timespec ts{.tv_sec = static_cast<time_t>(wait_ns / 1'000'000'000),
                .tv_nsec = static_cast<long>(wait_ns % 1'000'000'000)};
    pollfd pfd{.fd = registry_.notify_fd(), .events = POLLIN, .revents = 0};
    const int ready = ppoll(&pfd, watch ? 1 : 0, &ts, nullptr);
    // Anything but a clean timeout of a watched fd (an event, an error, a
    // signal, or the fd not watched): look.
    events_may_wait = !watch || ready != 0 || (pfd.revents & POLLIN) != 0;
  }
  publish_figures(shm::monotonic_ns());
  for (auto& [id, a] : registry_.allocations()) clear_ready(a->limits.mutable_region());
}

}  // namespace cushare::sched
