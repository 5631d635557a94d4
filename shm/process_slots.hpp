// Process slots of the `usage` region: claim, heartbeat, release, and
// reclaim of slots whose process died. Every state change of a slot is a CAS
// on ProcessSlot::state, so no crash can leave a lock behind:
//
//   kFree --claim CAS--> kClaiming --owner fills identity--> kActive
//   kActive --CAS by owner (release) or by one reclaimer--> kReclaiming
//   kReclaiming --bytes returned with exchange(0)--> kFree
//
// Exactly one caller wins the kActive -> kReclaiming CAS, and bytes leave a
// slot only through exchange(0), so each byte is returned to the totals once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "shm/layout.hpp"
#include "shm/proc_identity.hpp"

namespace cushare::shm {

inline SlotState slot_state(const ProcessSlot& slot) {
  return static_cast<SlotState>(slot.state.load(std::memory_order_acquire));
}

// Claims a free slot for `self` (state kActive on return, heartbeat =
// now_ns). Scans from a pid-derived start so concurrent claimers rarely
// collide. Returns the slot index, or nullopt when all kMaxSlots are taken.
std::optional<unsigned> claim_slot(UsageRegion& usage, const ProcessIdentity& self,
                                   std::uint64_t now_ns);

inline void heartbeat(ProcessSlot& slot, std::uint64_t now_ns) {
  slot.heartbeat_ns.store(now_ns, std::memory_order_relaxed);
}

// The owner gives its slot back while certainly holding no device memory:
// returns every byte and overhead charge to the totals and frees it. Returns
// the bytes returned (all GPUs), or nullopt if the slot was not active
// (already reclaimed). Not for a process's exit: see withdraw_marks.
std::optional<std::uint64_t> release_slot(UsageRegion& usage, unsigned index);

// The owner is exiting: its in-flight and demand marks go, since nothing it
// still launches is worth the scheduler's wait, but its bytes stay charged.
// The driver frees a process's memory at its teardown, after every exit
// handler has run, so only a reclaim that finds the process gone may return
// them (reclaim_dead_slots; a zombie counts as gone).
void withdraw_marks(UsageRegion& usage, unsigned index);

// The process of `slot` has work in flight on `gpu` (counted once in
// usage.gpus[gpu].busy_processes however often it is called), or no longer
// has. A reclaim or release takes the slot's marks back. mark_busy returns
// whether this made the allocation busy (the count went 0 -> 1), clear_busy
// whether this left it idle (the count went to 0).
bool mark_busy(UsageRegion& usage, ProcessSlot& slot, unsigned gpu);
bool clear_busy(UsageRegion& usage, ProcessSlot& slot, unsigned gpu);

// A thread of the process of `slot` waits at the launch gate for `gpu`
// (counted once in usage.gpus[gpu].demand), or none does any more. Taken
// back by a reclaim or release like the busy mark.
bool mark_demand(UsageRegion& usage, ProcessSlot& slot, unsigned gpu);
bool clear_demand(UsageRegion& usage, ProcessSlot& slot, unsigned gpu);

// The process's memory calls (memory_ops_begun / memory_ops_ended), read
// before a measurement of its device memory against its charges: `quiet`
// when none was in flight. memory_ops_quiet_since says whether none was in
// flight at the mark and none began after it, so the two figures read in
// between agree on every allocation and free.
struct MemoryOpsMark {
  std::uint64_t begun = 0;
  bool quiet = false;
};
// How many are in flight, at most (ended is read first).
inline std::uint64_t memory_ops_in_flight(const ProcessSlot& slot, std::uint64_t* begun = nullptr) {
  const std::uint64_t ended = slot.memory_ops_ended.load(std::memory_order_seq_cst);
  const std::uint64_t b = slot.memory_ops_begun.load(std::memory_order_seq_cst);
  if (begun) *begun = b;
  return b - ended;
}
inline MemoryOpsMark mark_memory_ops(const ProcessSlot& slot) {
  MemoryOpsMark m;
  m.quiet = memory_ops_in_flight(slot, &m.begun) == 0;
  return m;
}
inline bool memory_ops_quiet_since(const ProcessSlot& slot, const MemoryOpsMark& mark) {
  return mark.quiet && slot.memory_ops_begun.load(std::memory_order_seq_cst) == mark.begun;
}

// Moves slot `index` from `expected` to kReclaiming (only one caller can
// succeed), returns its bytes and overhead to the totals, clears it and frees
// it. Returns the bytes returned, or nullopt when the state was not
// `expected` (someone else got there first, or it changed).
//   expected = kActive: the owner is known dead (see Liveness below);
//   expected = kClaiming: the claimer is known dead (it holds no bytes);
//   expected = kReclaiming: finish a reclaim whose reclaimer died — only after
//     the slot has stayed kReclaiming for a bound (seconds), because a live
//     reclaimer may still be clearing it.
std::optional<std::uint64_t> reclaim_slot(UsageRegion& usage, unsigned index, SlotState expected);

enum class Liveness {
  kAlive,
  kDead,
  kUnknown,  // cannot be judged from here (other PID namespace, no host PID yet)
};

// Pure judgement from what /proc says about the process: `observed` is
// nullopt when /proc/<pid>/stat does not exist.
Liveness judge_liveness(std::uint64_t recorded_start_time, const std::optional<ProcStat>& observed);

// The identity fields of a slot, read once (pid with acquire).
struct SlotIdentity {
  std::uint32_t pid = 0;
  std::uint64_t pidns_inode = 0;
  std::uint64_t start_time = 0;
  std::uint32_t host_pid = 0;
  bool operator==(const SlotIdentity&) const = default;
};
SlotIdentity read_identity(const ProcessSlot& slot);

// Decides whether a slot's owner is alive by /proc.
class LivenessChecker {
 public:
  // Inside the container: judges slots whose pidns_inode equals
  // `own_pidns_inode` by /proc/<pid>/stat (start time must match; a zombie is
  // dead); other namespaces are kUnknown.
  static LivenessChecker same_namespace(std::uint64_t own_pidns_inode,
                                        std::string proc_root = "/proc");
  // Host daemon (host PID namespace): judges slots with a host_pid by
  // /proc/<host_pid>/stat and /proc/<host_pid>/ns/pid (must equal the slot's
  // pidns_inode); slots without host_pid are kUnknown.
  static LivenessChecker host(std::string proc_root = "/proc");

  Liveness check(const ProcessSlot& slot) const { return check(read_identity(slot)); }
  Liveness check(const SlotIdentity& id) const;

 private:
  LivenessChecker(bool host, std::uint64_t own_pidns, std::string proc_root)
      : host_(host), own_pidns_(own_pidns), proc_root_(std::move(proc_root)) {}
  bool host_;
  std::uint64_t own_pidns_;
  std::string proc_root_;
};

struct ReclaimResult {
  unsigned slots = 0;       // slots reclaimed by this call
  std::uint64_t bytes = 0;  // bytes + overhead they returned (all GPUs)
};

// Reclaims every kActive slot, and every kClaiming slot with a recorded pid,
// whose owner `checker` finds dead. Safe to run from any number of processes
// at once: after winning a slot's CAS it re-reads the identity, and if the
// slot changed owner since it was judged (freed and claimed again in between)
// it puts the state back untouched.
ReclaimResult reclaim_dead_slots(UsageRegion& usage, const LivenessChecker& checker);

// claim_slot, and when the region is full, reclaim_dead_slots then one more try.
std::optional<unsigned> claim_slot_reclaiming(UsageRegion& usage, const ProcessIdentity& self,
                                              std::uint64_t now_ns, const LivenessChecker& checker);

}  // namespace cushare::shm
