// Process slots: claim, release, full region, liveness judgement, reclaim of
// dead and half-claimed slots, and the host-daemon view through a fake /proc.
#include "shm/process_slots.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>

#include "shm/quota_ledger.hpp"
#include "test_util.hpp"

namespace cushare::shm {
namespace {

ProcessIdentity me() {
  return *self_identity();
}

TEST(ShmProcessSlots, ClaimFillsIdentityAndReleaseReturnsBytes) {
  auto usage = std::make_unique<UsageRegion>();
  const auto id = me();
  auto i = claim_slot(*usage, id, 111);
  ASSERT_TRUE(i.has_value());
  ProcessSlot& s = usage->slots[*i];
  EXPECT_EQ(slot_state(s), SlotState::kActive);
  EXPECT_EQ(s.pid.load(), id.pid);
  EXPECT_EQ(s.pidns_inode.load(), id.pidns_inode);
  EXPECT_EQ(s.start_time.load(), id.start_time);
  EXPECT_EQ(s.heartbeat_ns.load(), 111u);
  heartbeat(s, 222);
  EXPECT_EQ(s.heartbeat_ns.load(), 222u);

  QuotaLedger ledger(*usage);
  ASSERT_TRUE(ledger.try_reserve(0, s, 1000, kUnlimited));
  ASSERT_TRUE(ledger.try_reserve(7, s, 24, kUnlimited));
  ledger.charge_overhead(7, s, 6);
  auto returned = release_slot(*usage, *i);
  ASSERT_TRUE(returned.has_value());
  EXPECT_EQ(*returned, 1030u);
  EXPECT_EQ(usage->gpus[0].used_bytes.load(), 0u);
  EXPECT_EQ(usage->gpus[7].used_bytes.load(), 0u);
  EXPECT_EQ(slot_state(s), SlotState::kFree);
  EXPECT_EQ(s.pid.load(), 0u);
  EXPECT_FALSE(release_slot(*usage, *i).has_value());  // only once
}

TEST(ShmProcessSlots, AMemoryCallInFlightOrBegunSpoilsAMeasurement) {
  auto usage = std::make_unique<UsageRegion>();
  for (ProcessSlot& s : usage->slots) s.memory_ops_begun = 7;  // owners killed inside a call
  auto i = claim_slot(*usage, me(), 1);
  ASSERT_TRUE(i.has_value());
  ProcessSlot& mine = usage->slots[*i];
  MemoryOpsMark quiet = mark_memory_ops(mine);
  EXPECT_TRUE(quiet.quiet) << "a claimed slot starts with no call in flight";
  EXPECT_TRUE(memory_ops_quiet_since(mine, quiet));

  mine.memory_ops_begun.fetch_add(1);  // a call begins
  EXPECT_FALSE(memory_ops_quiet_since(mine, quiet)) << "it began after the mark";
  MemoryOpsMark busy = mark_memory_ops(mine);
  EXPECT_FALSE(busy.quiet);
  mine.memory_ops_ended.fetch_add(1);  // and ends
  EXPECT_FALSE(memory_ops_quiet_since(mine, busy)) << "it was in flight at the mark";
  EXPECT_TRUE(memory_ops_quiet_since(mine, mark_memory_ops(mine)));
}

TEST(ShmProcessSlots, FullRegion) {
  auto usage = std::make_unique<UsageRegion>();
  auto id = me();
  for (unsigned k = 0; k < kMaxSlots; ++k) ASSERT_TRUE(claim_slot(*usage, id, 1).has_value()) << k;
  EXPECT_FALSE(claim_slot(*usage, id, 1).has_value());
  // All owned by a live process (us): reclaiming frees nothing.
  const auto checker = LivenessChecker::same_namespace(id.pidns_inode);
  EXPECT_FALSE(claim_slot_reclaiming(*usage, id, 1, checker).has_value());
  // A dead owner's slot is reclaimed to make room.
  const pid_t child = test::fork_child([] { return 0; });
  test::wait_child(child);
  usage->slots[17].pid.store(static_cast<std::uint32_t>(child));
  auto got = claim_slot_reclaiming(*usage, id, 1, checker);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, 17u);
}

TEST(ShmProcessSlots, JudgeLiveness) {
  EXPECT_EQ(judge_liveness(100, std::nullopt), Liveness::kDead);
  EXPECT_EQ(judge_liveness(100, ProcStat{'S', 100}), Liveness::kAlive);
  EXPECT_EQ(judge_liveness(100, ProcStat{'R', 101}), Liveness::kDead);  // pid reused
  EXPECT_EQ(judge_liveness(100, ProcStat{'Z', 100}), Liveness::kDead);  // zombie
  EXPECT_EQ(judge_liveness(100, ProcStat{'X', 100}), Liveness::kDead);
  EXPECT_EQ(judge_liveness(0, ProcStat{'S', 5}), Liveness::kAlive);  // start not recorded yet
}

TEST(ShmProcessSlots, SameNamespaceChecker) {
  const auto id = me();
  const auto checker = LivenessChecker::same_namespace(id.pidns_inode);
  ProcessSlot s{};
  EXPECT_EQ(checker.check(s), Liveness::kUnknown);  // pid 0
  s.pid.store(id.pid);
  s.pidns_inode.store(id.pidns_inode);
  s.start_time.store(id.start_time);
  EXPECT_EQ(checker.check(s), Liveness::kAlive);
  s.start_time.store(id.start_time + 1);
  EXPECT_EQ(checker.check(s), Liveness::kDead);
  s.pidns_inode.store(id.pidns_inode + 1);
  EXPECT_EQ(checker.check(s), Liveness::kUnknown);  // another namespace: not ours to judge
}

// A fake /proc for the host-daemon view.
struct FakeProc {
  test::TempDir dir;
  std::uint64_t add(pid_t pid, char state, std::uint64_t start) {
    const auto p = dir.path() / std::to_string(pid);
    std::filesystem::create_directories(p / "ns");
    std::ofstream(p / "stat") << pid << " (worker) " << state
                              << " 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " << start << " 0 0\n";
    std::ofstream(p / "ns" / "pid") << "ns";
    struct stat sb {};
    ::stat((p / "ns" / "pid").c_str(), &sb);
    return sb.st_ino;
  }
};

TEST(ShmProcessSlots, HostCheckerUsesHostPid) {
  FakeProc proc;
  const std::uint64_t ns = proc.add(5000, 'S', 777);
  const auto checker = LivenessChecker::host(proc.dir.path().string());
  ProcessSlot s{};
  s.pid.store(12);  // container PID: meaningless on the host
  s.pidns_inode.store(ns);
  s.start_time.store(777);
  EXPECT_EQ(checker.check(s), Liveness::kUnknown);  // no host PID mapped yet
  s.host_pid.store(5000);
  EXPECT_EQ(checker.check(s), Liveness::kAlive);
  s.start_time.store(778);
  EXPECT_EQ(checker.check(s), Liveness::kDead);
  s.start_time.store(777);
  s.pidns_inode.store(ns + 1);  // host PID now belongs to another namespace
  EXPECT_EQ(checker.check(s), Liveness::kDead);
  s.pidns_inode.store(ns);
  s.host_pid.store(5001);  // gone
  EXPECT_EQ(checker.check(s), Liveness::kDead);
  proc.add(5002, 'Z', 777);
  s.host_pid.store(5002);
  EXPECT_EQ(checker.check(s), Liveness::kDead);
}

TEST(ShmProcessSlots, StuckClaimingSlots) {
  auto usage = std::make_unique<UsageRegion>();
  const auto id = me();
  const auto checker = LivenessChecker::same_namespace(id.pidns_inode);
  const pid_t child = test::fork_child([] { return 0; });
  test::wait_child(child);
  // Died after writing its pid: reclaimable.
  usage->slots[3].state.store(static_cast<std::uint32_t>(SlotState::kClaiming));
  usage->slots[3].pid.store(static_cast<std::uint32_t>(child));
  usage->slots[3].pidns_inode.store(id.pidns_inode);
  // Died before writing its pid: cannot be judged, stays.
  usage->slots[4].state.store(static_cast<std::uint32_t>(SlotState::kClaiming));
  // A live claimer (us) that has not finished: stays.
  usage->slots[5].state.store(static_cast<std::uint32_t>(SlotState::kClaiming));
  usage->slots[5].pid.store(id.pid);
  usage->slots[5].pidns_inode.store(id.pidns_inode);
  const auto r = reclaim_dead_slots(*usage, checker);
  EXPECT_EQ(r.slots, 1u);
  EXPECT_EQ(r.bytes, 0u);
  EXPECT_EQ(slot_state(usage->slots[3]), SlotState::kFree);
  EXPECT_EQ(slot_state(usage->slots[4]), SlotState::kClaiming);
  EXPECT_EQ(slot_state(usage->slots[5]), SlotState::kClaiming);
  // The daemon's bound for pid-0 claims: explicit reclaim by expected state.
  EXPECT_TRUE(reclaim_slot(*usage, 4, SlotState::kClaiming).has_value());
  EXPECT_EQ(slot_state(usage->slots[4]), SlotState::kFree);
  EXPECT_FALSE(reclaim_slot(*usage, 4, SlotState::kClaiming).has_value());
}

TEST(ShmProcessSlots, FinishingAStuckReclaimReturnsBytesOnce) {
  auto usage = std::make_unique<UsageRegion>();
  ProcessSlot& s = usage->slots[9];
  usage->gpus[1].used_bytes.store(500);
  s.bytes[1].store(300);
  s.overhead[1].store(50);
  s.state.store(static_cast<std::uint32_t>(SlotState::kReclaiming));  // reclaimer died here
  EXPECT_EQ(*reclaim_slot(*usage, 9, SlotState::kReclaiming), 350u);
  EXPECT_EQ(usage->gpus[1].used_bytes.load(), 150u);
  EXPECT_EQ(slot_state(s), SlotState::kFree);
  EXPECT_FALSE(reclaim_slot(*usage, 9, SlotState::kReclaiming).has_value());
  EXPECT_EQ(usage->gpus[1].used_bytes.load(), 150u);
}

TEST(ShmProcessSlots, ReclaimNeverStealsAReclaimedAndReclaimedSlot) {
  // The slot judged dead is freed and claimed by a live process before the
  // reclaimer's CAS: the identity re-check puts it back untouched. Simulated
  // with a checker judging a snapshot taken earlier.
  auto usage = std::make_unique<UsageRegion>();
  const auto id = me();
  auto i = claim_slot(*usage, id, 1);
  ASSERT_TRUE(i.has_value());
  QuotaLedger(*usage).try_reserve(0, usage->slots[*i], 42, kUnlimited);
  SlotIdentity stale = read_identity(usage->slots[*i]);
  stale.start_time += 1;  // "the previous owner"
  EXPECT_NE(stale, read_identity(usage->slots[*i]));
  // reclaim_dead_slots on the live slot finds it alive and leaves it.
  const auto r = reclaim_dead_slots(*usage, LivenessChecker::same_namespace(id.pidns_inode));
  EXPECT_EQ(r.slots, 0u);
  EXPECT_EQ(usage->gpus[0].used_bytes.load(), 42u);
  EXPECT_EQ(slot_state(usage->slots[*i]), SlotState::kActive);
}

// The per-process marks on a GPU: "work in flight" (busy) and "a thread
// waiting at the launch gate" (demand) keep the same books.
struct MarkKind {
  const char* name;
  bool (*mark)(UsageRegion&, ProcessSlot&, unsigned);
  bool (*clear)(UsageRegion&, ProcessSlot&, unsigned);
  std::atomic<std::uint32_t> GpuUsage::*count;
  std::atomic<std::uint32_t> ProcessSlot::*bits;
};

class ShmProcessMarks : public ::testing::TestWithParam<MarkKind> {
 protected:
  std::uint32_t count(const UsageRegion& u, unsigned gpu) const {
    return (u.gpus[gpu].*GetParam().count).load();
  }
  std::uint32_t bits(const ProcessSlot& s) const { return (s.*GetParam().bits).load(); }
  void mark(UsageRegion& u, ProcessSlot& s, unsigned gpu) const { GetParam().mark(u, s, gpu); }
  void clear(UsageRegion& u, ProcessSlot& s, unsigned gpu) const { GetParam().clear(u, s, gpu); }
};

TEST_P(ShmProcessMarks, CountEachProcessOnce) {
  auto usage = std::make_unique<UsageRegion>();
  const auto id = me();
  auto a = claim_slot(*usage, id, 1);
  auto b = claim_slot(*usage, id, 1);
  ASSERT_TRUE(a && b);
  ProcessSlot& sa = usage->slots[*a];
  ProcessSlot& sb = usage->slots[*b];
  mark(*usage, sa, 3);
  mark(*usage, sa, 3);  // idempotent
  mark(*usage, sb, 3);
  mark(*usage, sb, 0);
  EXPECT_EQ(count(*usage, 3), 2u);
  EXPECT_EQ(count(*usage, 0), 1u);
  clear(*usage, sa, 3);
  clear(*usage, sa, 3);  // idempotent
  EXPECT_EQ(count(*usage, 3), 1u);
  EXPECT_EQ(bits(sa), 0u);
  EXPECT_EQ(bits(sb), (1u << 3) | 1u);
}

TEST_P(ShmProcessMarks, SayWhenTheAllocationTurnsBusyAndIdle) {
  // The launch gate measures idle gaps only between the process that left
  // the allocation idle and the next one to make it busy.
  auto usage = std::make_unique<UsageRegion>();
  const auto id = me();
  auto a = claim_slot(*usage, id, 1);
  auto b = claim_slot(*usage, id, 1);
  ASSERT_TRUE(a && b);
  ProcessSlot& sa = usage->slots[*a];
  ProcessSlot& sb = usage->slots[*b];
  EXPECT_TRUE(GetParam().mark(*usage, sa, 2));    // 0 -> 1
  EXPECT_FALSE(GetParam().mark(*usage, sa, 2));   // already counted
  EXPECT_FALSE(GetParam().mark(*usage, sb, 2));   // 1 -> 2
  EXPECT_FALSE(GetParam().clear(*usage, sa, 2));  // 2 -> 1
  EXPECT_FALSE(GetParam().clear(*usage, sa, 2));  // not counted any more
  EXPECT_TRUE(GetParam().clear(*usage, sb, 2));   // 1 -> 0
}

TEST_P(ShmProcessMarks, ReclaimTakesADeadProcessOutOfTheCount) {
  // A process killed with work in flight, or while a thread waited at the
  // gate, never clears its marks: whoever reclaims (or releases) its slot
  // does, exactly once.
  auto usage = std::make_unique<UsageRegion>();
  const auto id = me();
  auto live = claim_slot(*usage, id, 1);
  auto dead = claim_slot(*usage, id, 1);
  ASSERT_TRUE(live && dead);
  mark(*usage, usage->slots[*live], 2);
  mark(*usage, usage->slots[*dead], 2);
  mark(*usage, usage->slots[*dead], 5);
  ASSERT_TRUE(reclaim_slot(*usage, *dead, SlotState::kActive).has_value());
  EXPECT_FALSE(reclaim_slot(*usage, *dead, SlotState::kActive).has_value());
  EXPECT_EQ(count(*usage, 2), 1u);
  EXPECT_EQ(count(*usage, 5), 0u);
  EXPECT_EQ(bits(usage->slots[*dead]), 0u);
  // The owner clearing after the reclaim changes nothing.
  clear(*usage, usage->slots[*dead], 5);
  EXPECT_EQ(count(*usage, 5), 0u);
  ASSERT_TRUE(release_slot(*usage, *live).has_value());
  EXPECT_EQ(count(*usage, 2), 0u);
}

TEST_P(ShmProcessMarks, ExitWithdrawsTheMarksAndKeepsTheCharge) {
  // The device frees an exiting process's memory only at its teardown: the
  // charge stays for a reclaim that finds the process gone; the marks go.
  auto usage = std::make_unique<UsageRegion>();
  auto i = claim_slot(*usage, me(), 1);
  ASSERT_TRUE(i);
  ProcessSlot& s = usage->slots[*i];
  QuotaLedger ledger(*usage);
  ASSERT_TRUE(ledger.try_reserve(2, s, 1000, kUnlimited));
  ledger.charge_overhead(2, s, 300);
  mark(*usage, s, 2);
  withdraw_marks(*usage, *i);
  EXPECT_EQ(count(*usage, 2), 0u);
  EXPECT_EQ(bits(s), 0u);
  EXPECT_EQ(slot_state(s), SlotState::kActive);
  EXPECT_EQ(usage->gpus[2].used_bytes.load(), 1300u);
  withdraw_marks(*usage, *i);  // a second exit handler, or the reclaim later: counted once
  ASSERT_EQ(reclaim_slot(*usage, *i, SlotState::kActive), std::optional<std::uint64_t>(1300u));
  EXPECT_EQ(count(*usage, 2), 0u);
  EXPECT_EQ(usage->gpus[2].used_bytes.load(), 0u);
}

TEST_P(ShmProcessMarks, ACountATenantZeroedNeverWrapsOnReclaim) {
  auto usage = std::make_unique<UsageRegion>();
  auto i = claim_slot(*usage, me(), 1);
  ASSERT_TRUE(i);
  mark(*usage, usage->slots[*i], 1);
  (usage->gpus[1].*GetParam().count).store(0);  // written over by a tenant
  ASSERT_TRUE(release_slot(*usage, *i).has_value());
  EXPECT_EQ(count(*usage, 1), 0u);
}

TEST(ShmProcessSlots, BusyAndDemandMarksAreIndependent) {
  auto usage = std::make_unique<UsageRegion>();
  auto i = claim_slot(*usage, me(), 1);
  ASSERT_TRUE(i);
  ProcessSlot& s = usage->slots[*i];
  mark_busy(*usage, s, 4);
  mark_demand(*usage, s, 4);
  clear_busy(*usage, s, 4);
  EXPECT_EQ(usage->gpus[4].busy_processes.load(), 0u);
  EXPECT_EQ(usage->gpus[4].demand.load(), 1u);
  EXPECT_EQ(s.demand_gpus.load(), 1u << 4);
}

INSTANTIATE_TEST_SUITE_P(
    BusyAndDemand, ShmProcessMarks,
    ::testing::Values(MarkKind{"busy", mark_busy, clear_busy, &GpuUsage::busy_processes,
                               &ProcessSlot::busy_gpus},
                      MarkKind{"demand", mark_demand, clear_demand, &GpuUsage::demand,
                               &ProcessSlot::demand_gpus}),
    [](const ::testing::TestParamInfo<MarkKind>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cushare::shm
