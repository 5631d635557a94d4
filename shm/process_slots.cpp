#include "shm/process_slots.hpp"

namespace cushare::shm {
namespace {

constexpr auto u32(SlotState s) {
  return static_cast<std::uint32_t>(s);
}

// Never below zero, whatever a tenant wrote into the counter.
// Returns the count left (0 when it already was).
std::uint32_t decrement_floor_zero(std::atomic<std::uint32_t>& count) {
  std::uint32_t cur = count.load(std::memory_order_relaxed);
  while (cur > 0 && !count.compare_exchange_weak(cur, cur - 1, std::memory_order_seq_cst,
                                                 std::memory_order_relaxed)) {
  }
  return cur > 0 ? cur - 1 : 0;
}

// A per-process mark on one GPU: bit `gpu` of the slot's `bits`, counted once
// in the GPU's `count` while set. Returns whether this made the count 1.
bool set_mark(std::atomic<std::uint32_t>& bits, std::atomic<std::uint32_t>& count, unsigned gpu) {
  const std::uint32_t bit = 1u << gpu;
  if ((bits.fetch_or(bit, std::memory_order_seq_cst) & bit) == 0)
    return count.fetch_add(1, std::memory_order_seq_cst) == 0;
  return false;
}

// Returns whether this made the count 0.
bool clear_mark(std::atomic<std::uint32_t>& bits, std::atomic<std::uint32_t>& count, unsigned gpu) {
  const std::uint32_t bit = 1u << gpu;
  if (bits.fetch_and(~bit, std::memory_order_seq_cst) & bit)
    return decrement_floor_zero(count) == 0;
  return false;
}

}  // namespace

std::optional<unsigned> claim_slot(UsageRegion& usage, const ProcessIdentity& self,
                                   std::uint64_t now_ns) {
  const unsigned start = self.pid % kMaxSlots;
  for (unsigned k = 0; k < kMaxSlots; ++k) {
    const unsigned i = (start + k) % kMaxSlots;
    ProcessSlot& s = usage.slots[i];
    std::uint32_t expected = u32(SlotState::kFree);
    if (s.state.load(std::memory_order_relaxed) != expected) continue;
    if (!s.state.compare_exchange_strong(expected, u32(SlotState::kClaiming),
                                         std::memory_order_acq_rel, std::memory_order_relaxed))
      continue;
    // pid first: a reclaimer judges a kClaiming slot only once pid is set.
    s.start_time.store(0, std::memory_order_relaxed);
    s.pid.store(self.pid, std::memory_order_release);
    s.pidns_inode.store(self.pidns_inode, std::memory_order_relaxed);
    s.start_time.store(self.start_time, std::memory_order_relaxed);
    s.host_pid.store(0, std::memory_order_relaxed);
    s.heartbeat_ns.store(now_ns, std::memory_order_relaxed);
    // A previous owner killed inside a memory call left one in flight.
    s.memory_ops_begun.store(0, std::memory_order_relaxed);
    s.memory_ops_ended.store(0, std::memory_order_relaxed);
    // Bytes of the previous owner were cleared by whoever freed the slot.
    std::uint32_t claiming = u32(SlotState::kClaiming);
    if (s.state.compare_exchange_strong(claiming, u32(SlotState::kActive),
                                        std::memory_order_acq_rel, std::memory_order_relaxed))
      return i;
    // Someone reclaimed our half-claimed slot (we looked dead, or stalled for
    // the stuck-claim bound): look for another one.
  }
  return std::nullopt;
}

namespace {

// Each mark is taken back once: exchange(0) leaves nothing for a second
// caller, and the owner clears a bit only if it is still set.
void take_marks_back(UsageRegion& usage, ProcessSlot& s) {
  const std::uint32_t busy = s.busy_gpus.exchange(0, std::memory_order_acq_rel);
  const std::uint32_t demand = s.demand_gpus.exchange(0, std::memory_order_acq_rel);
  for (unsigned g = 0; g < kMaxGpus; ++g) {
    if (busy & (1u << g)) decrement_floor_zero(usage.gpus[g].busy_processes);
    if (demand & (1u << g)) decrement_floor_zero(usage.gpus[g].demand);
  }
}

}  // namespace

std::optional<std::uint64_t> reclaim_slot(UsageRegion& usage, unsigned index, SlotState expected) {
  ProcessSlot& s = usage.slots[index];
  std::uint32_t from = u32(expected);
  if (expected != SlotState::kReclaiming &&
      !s.state.compare_exchange_strong(from, u32(SlotState::kReclaiming), std::memory_order_acq_rel,
                                       std::memory_order_relaxed))
    return std::nullopt;
  if (expected == SlotState::kReclaiming && slot_state(s) != SlotState::kReclaiming)
    return std::nullopt;
  std::uint64_t returned = 0;
  for (unsigned g = 0; g < kMaxGpus; ++g) {
    const std::uint64_t b = s.bytes[g].exchange(0, std::memory_order_acq_rel);
    const std::uint64_t o = s.overhead[g].exchange(0, std::memory_order_acq_rel);
    if (b + o != 0) usage.gpus[g].used_bytes.fetch_sub(b + o, std::memory_order_acq_rel);
    returned += b + o;
  }
  // The process's in-flight and demand marks go with it.
  take_marks_back(usage, s);
  s.host_pid.store(0, std::memory_order_relaxed);
  s.heartbeat_ns.store(0, std::memory_order_relaxed);
  s.start_time.store(0, std::memory_order_relaxed);
  s.pidns_inode.store(0, std::memory_order_relaxed);
  s.pid.store(0, std::memory_order_relaxed);
  std::uint32_t reclaiming = u32(SlotState::kReclaiming);
  s.state.compare_exchange_strong(reclaiming, u32(SlotState::kFree), std::memory_order_acq_rel,
                                  std::memory_order_relaxed);
  return returned;
}

bool mark_busy(UsageRegion& usage, ProcessSlot& slot, unsigned gpu) {
  return set_mark(slot.busy_gpus, usage.gpus[gpu].busy_processes, gpu);
}

bool clear_busy(UsageRegion& usage, ProcessSlot& slot, unsigned gpu) {
  return clear_mark(slot.busy_gpus, usage.gpus[gpu].busy_processes, gpu);
}

bool mark_demand(UsageRegion& usage, ProcessSlot& slot, unsigned gpu) {
  return set_mark(slot.demand_gpus, usage.gpus[gpu].demand, gpu);
}

bool clear_demand(UsageRegion& usage, ProcessSlot& slot, unsigned gpu) {
  return clear_mark(slot.demand_gpus, usage.gpus[gpu].demand, gpu);
}

std::optional<std::uint64_t> release_slot(UsageRegion& usage, unsigned index) {
  return reclaim_slot(usage, index, SlotState::kActive);
}

void withdraw_marks(UsageRegion& usage, unsigned index) {
  take_marks_back(usage, usage.slots[index]);
}

Liveness judge_liveness(std::uint64_t recorded_start_time,
                        const std::optional<ProcStat>& observed) {
  if (!observed) return Liveness::kDead;
  if (observed->state == 'Z' || observed->state == 'X') return Liveness::kDead;
  // start_time 0: the claimer died (or is) before recording it; the pid
  // exists, so it may be the claimer: not provably dead.
  if (recorded_start_time == 0) return Liveness::kAlive;
  return observed->start_time == recorded_start_time ? Liveness::kAlive : Liveness::kDead;
}

LivenessChecker LivenessChecker::same_namespace(std::uint64_t own_pidns_inode,
                                                std::string proc_root) {
  return LivenessChecker(false, own_pidns_inode, std::move(proc_root));
}

LivenessChecker LivenessChecker::host(std::string proc_root) {
  return LivenessChecker(true, 0, std::move(proc_root));
}

SlotIdentity read_identity(const ProcessSlot& slot) {
  SlotIdentity id;
  id.pid = slot.pid.load(std::memory_order_acquire);
  id.pidns_inode = slot.pidns_inode.load(std::memory_order_relaxed);
  id.start_time = slot.start_time.load(std::memory_order_relaxed);
  id.host_pid = slot.host_pid.load(std::memory_order_relaxed);
  return id;
}

Liveness LivenessChecker::check(const SlotIdentity& id) const {
  const std::uint32_t pid = id.pid;
  const std::uint64_t ns = id.pidns_inode;
  const std::uint64_t start = id.start_time;
  if (pid == 0) return Liveness::kUnknown;
  if (!host_) {
    if (ns != own_pidns_) return Liveness::kUnknown;
    return judge_liveness(start, read_proc_stat(static_cast<pid_t>(pid), proc_root_));
  }
  const std::uint32_t host_pid = id.host_pid;
  if (host_pid == 0) return Liveness::kUnknown;
  const auto observed = read_proc_stat(static_cast<pid_t>(host_pid), proc_root_);
  const Liveness l = judge_liveness(start, observed);
  if (l != Liveness::kAlive) return l;
  // Same start time, but is it the same namespace? (A host PID mapped wrongly
  // must not keep a dead slot alive, nor kill a live one: only "different
  // namespace" proves death.)
  const auto host_ns = read_pidns_inode(static_cast<pid_t>(host_pid), proc_root_);
  if (host_ns && ns != 0 && *host_ns != ns) return Liveness::kDead;
  return Liveness::kAlive;
}

ReclaimResult reclaim_dead_slots(UsageRegion& usage, const LivenessChecker& checker) {
  ReclaimResult r;
  for (unsigned i = 0; i < kMaxSlots; ++i) {
    ProcessSlot& s = usage.slots[i];
    const SlotState st = slot_state(s);
    if (st != SlotState::kActive && st != SlotState::kClaiming) continue;
    const SlotIdentity judged = read_identity(s);
    if (checker.check(judged) != Liveness::kDead) continue;
    std::uint32_t from = u32(st);
    if (!s.state.compare_exchange_strong(from, u32(SlotState::kReclaiming),
                                         std::memory_order_acq_rel, std::memory_order_relaxed))
      continue;
    if (read_identity(s) != judged) {
      // Freed and claimed by a live process between judgement and CAS.
      std::uint32_t back = u32(SlotState::kReclaiming);
      s.state.compare_exchange_strong(back, u32(st), std::memory_order_acq_rel,
                                      std::memory_order_relaxed);
      continue;
    }
    if (auto bytes = reclaim_slot(usage, i, SlotState::kReclaiming)) {
      ++r.slots;
      r.bytes += *bytes;
    }
  }
  return r;
}

std::optional<unsigned> claim_slot_reclaiming(UsageRegion& usage, const ProcessIdentity& self,
                                              std::uint64_t now_ns,
                                              const LivenessChecker& checker) {
  if (auto i = claim_slot(usage, self, now_ns)) return i;
  reclaim_dead_slots(usage, checker);
  return claim_slot(usage, self, now_ns);
}

}  // namespace cushare::shm
