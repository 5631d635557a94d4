// The daemon's defences against what tenants write: process verification, the
// ledger check and the ground-truth policy (pure parts, fakes for /proc).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "scheduler/ground_truth.hpp"
#include "scheduler/ledger_check.hpp"
#include "scheduler/process_verifier.hpp"
#include "shm/process_slots.hpp"
#include "shm/quota_ledger.hpp"

namespace cushare::sched {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

// ---------------------------------------------------------------- maps ----

TEST(MapsInode, FindsTheInodeWhateverTheDeviceColumnSays) {
  const std::string maps =
      "55d0c0a00000-55d0c0a02000 r--p 00000000 fe:00 131 /usr/bin/true\n"
      "7f00aa000000-7f00aa100000 rw-s 00000000 00:2d 4242 /var/run/cushare/usage\n"
      "7ffd6a1d1000-7ffd6a1f2000 rw-p 00000000 00:00 0 [stack]\n";
  EXPECT_TRUE(maps_inode(maps, 4242));
  EXPECT_TRUE(maps_inode(maps, 131));
  EXPECT_FALSE(maps_inode(maps, 424));
  EXPECT_FALSE(maps_inode(maps, 42420));
  EXPECT_FALSE(maps_inode("", 4242));
  EXPECT_FALSE(maps_inode("garbage without fields\n\n 1 2 3", 4242));
  // A path that merely contains the number is not a match.
  EXPECT_FALSE(maps_inode("7f-7f rw-s 0 00:2d 7 /tmp/4242\n", 4242));
}

// A tenant decides how long its processes' maps are: the reader keeps a
// line's first fields only, stops at the first confirmed match, and reads no
// further than its limit.
TEST(ScanMaps, StopsAtTheFirstConfirmedMatchAndAtTheLimit) {
  const std::string long_path(4096, 'x');
  std::string text;
  for (int i = 0; i < 1000; ++i)
    text += "7f00aa000000-7f00aa001000 r--p 00000000 00:2d 4242 /" + long_path + "\n";
  text += "7f00bb000000-7f00bb100000 rw-s 00000000 00:2d 4242 /var/run/cushare/usage\n";
  std::size_t served = 0;
  const auto reader = [&](std::string_view all) {
    return [&served, all](char* buf, std::size_t size) mutable -> long {
      const std::size_t n = std::min(size, all.size() - served);
      std::copy_n(all.data() + served, n, buf);
      served += n;
      return static_cast<long>(n);
    };
  };
  std::vector<std::string> asked;
  const auto only_the_usage = [&](std::string_view range) {
    asked.emplace_back(range);
    return range == "7f00bb000000-7f00bb100000";
  };
  // Every line has the inode number; only the last one is the file itself.
  EXPECT_EQ(scan_maps(reader(text), 4242, text.size() + 1, only_the_usage), MapsAnswer::kMaps);
  EXPECT_EQ(asked.size(), 1001u);
  EXPECT_EQ(asked.front(), "7f00aa000000-7f00aa001000");
  // The same text past a limit of 1 MiB: not judged, and not read on.
  served = 0;
  EXPECT_EQ(scan_maps(reader(text), 4242, 1u << 20, only_the_usage), MapsAnswer::kTooLong);
  EXPECT_LT(served, (1u << 20) + (64u << 10) + 1);
  served = 0;
  EXPECT_EQ(scan_maps(reader(text), 99, text.size() + 1, only_the_usage), MapsAnswer::kDoesNotMap);
  const auto failing = [](char*, std::size_t) -> long { return -1; };
  EXPECT_EQ(scan_maps(failing, 4242, 1024, only_the_usage), MapsAnswer::kUnreadable);
  // A last line without its newline counts.
  served = 0;
  const std::string unterminated = "7f00bb000000-7f00bb100000 rw-s 0 00:2d 4242 /x";
  EXPECT_EQ(scan_maps(reader(unterminated), 4242, 1024, only_the_usage), MapsAnswer::kMaps);
}

TEST(MapFilesName, DropsTheLeadingZerosThatMapsPrints) {
  EXPECT_EQ(map_files_name("00400000-00452000"), "400000-452000");
  EXPECT_EQ(map_files_name("7f00aa000000-7f00aa100000"), "7f00aa000000-7f00aa100000");
  EXPECT_EQ(map_files_name("00000000-00001000"), "0-1000");
  EXPECT_EQ(map_files_name("garbage"), "garbage");
}

// On this machine's /proc: a file this process maps is found by its device
// and inode, and the same inode number on another device is not (where
// map_files can be read; otherwise the number alone decides).
TEST(ProcHostMaps, MatchesTheMappedFileItselfAndRemembersTheAnswer) {
  char path[] = "/tmp/cushare-maps-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  void* map = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  struct stat sb {};
  ASSERT_EQ(fstat(fd, &sb), 0);
  const auto dev = static_cast<std::uint64_t>(sb.st_dev);
  const auto ino = static_cast<std::uint64_t>(sb.st_ino);
  const auto self = static_cast<std::uint32_t>(getpid());
  ProcHost host("/proc");
  EXPECT_EQ(host.maps_file(self, dev, ino), MapsAnswer::kMaps);
  EXPECT_EQ(host.maps_file(self, dev, ino + 1), MapsAnswer::kDoesNotMap);
  // Where this process may read map_files (CAP_SYS_ADMIN, or
  // CAP_CHECKPOINT_RESTORE): otherwise the inode number alone decides.
  char range[64];
  const auto start = reinterpret_cast<std::uintptr_t>(map);
  std::snprintf(range, sizeof range, "/proc/self/map_files/%lx-%lx",
                static_cast<unsigned long>(start), static_cast<unsigned long>(start + 4096));
  struct stat mapped {};
  if (::stat(range, &mapped) == 0) {
    EXPECT_EQ(host.maps_file(self, dev + 1, ino), MapsAnswer::kDoesNotMap);
  }
  munmap(map, 4096);
  // Within the pass the answer is remembered: the maps are not read again.
  EXPECT_EQ(host.maps_file(self, dev, ino), MapsAnswer::kMaps);
  EXPECT_EQ(ProcHost("/proc").maps_file(self, dev, ino), MapsAnswer::kDoesNotMap);
  close(fd);
  unlink(path);
}

// ---------------------------------------------------------- verification ----

struct FakeHost : AllocationProcesses::Host {
  HostPidTable t;
  int scans = 0;
  std::map<std::uint32_t, shm::ProcStat> procs;
  std::map<std::uint32_t, MapsAnswer> maps;
  const HostPidTable& table() override {
    ++scans;
    return t;
  }
  std::optional<shm::ProcStat> stat(std::uint32_t pid) override {
    auto it = procs.find(pid);
    if (it == procs.end()) return std::nullopt;
    return it->second;
  }
  std::set<std::uint32_t> maps_read;  // the host PIDs whose maps were looked at
  MapsAnswer maps_file(std::uint32_t pid, std::uint64_t, std::uint64_t) override {
    maps_read.insert(pid);
    auto it = maps.find(pid);
    return it == maps.end() ? MapsAnswer::kDoesNotMap : it->second;
  }
  // A host process: pid `host` is `ns_pid` in namespace `ns`, started at `start`.
  void process(std::uint32_t host, std::uint64_t ns, std::uint32_t ns_pid, std::uint64_t start,
               bool maps_usage = true) {
    t.add({ns, ns_pid, start}, host);
    procs[host] = shm::ProcStat{'S', start};
    maps[host] = maps_usage ? MapsAnswer::kMaps : MapsAnswer::kDoesNotMap;
  }
};

class Verification : public ::testing::Test {
 protected:
  void SetUp() override { usage_ = std::make_unique<shm::UsageRegion>(); }
  unsigned slot(std::uint64_t ns, std::uint32_t pid, std::uint64_t start) {
    shm::ProcessIdentity id{.pid = pid, .pidns_inode = ns, .start_time = start};
    auto s = shm::claim_slot(*usage_, id, 1);
    EXPECT_TRUE(s.has_value());
    return *s;
  }
  std::unique_ptr<shm::UsageRegion> usage_;
  FakeHost host_;
  AllocationProcesses procs_;
};

TEST_F(Verification, ASlotCountsOnlyOnceItsProcessIsFoundMappingTheUsageFile) {
  host_.process(5001, 77, 10, 1000);
  const unsigned s = slot(77, 10, 1000);
  auto verdicts = procs_.refresh(*usage_, 1, 2, host_, 0);
  EXPECT_TRUE(verdicts.empty());
  ASSERT_EQ(procs_.live(), 1u);
  EXPECT_EQ(procs_.verified().at(s).host_pid, 5001u);
  EXPECT_EQ(usage_->slots[s].host_pid.load(), 5001u);
}

TEST_F(Verification, AForgedHostPidIsOverwrittenAndNeverTrusted) {
  const unsigned s = slot(77, 10, 1000);
  usage_->slots[s].host_pid.store(1);  // init: alive, but not this process
  host_.process(1, 1, 1, 1, /*maps_usage=*/false);
  auto verdicts = procs_.refresh(*usage_, 1, 2, host_, 0);
  EXPECT_EQ(procs_.live(), 0u);
  EXPECT_EQ(usage_->slots[s].host_pid.load(), 0u);
  EXPECT_EQ(verdicts.at(s), SlotVerdict::kUnverified);
}

TEST_F(Verification, ABorrowedIdentityOfAProcessThatDoesNotMapTheFileIsNotLive) {
  host_.process(6000, 88, 3, 500, /*maps_usage=*/false);  // another container's process
  const unsigned s = slot(88, 3, 500);
  auto verdicts = procs_.refresh(*usage_, 1, 2, host_, 0);
  EXPECT_EQ(procs_.live(), 0u);
  EXPECT_EQ(verdicts.at(s), SlotVerdict::kUnverified);
}

TEST_F(Verification, ASlotOfAVisibleNamespaceWithoutItsProcessIsDead) {
  host_.process(5001, 77, 10, 1000);
  const unsigned s = slot(77, 11, 1000);  // pid 11 of namespace 77 does not exist
  auto verdicts = procs_.refresh(*usage_, 1, 2, host_, 0);
  EXPECT_EQ(verdicts.at(s), SlotVerdict::kDead);
}

TEST_F(Verification, UnjudgedSlotsAreRetriedAtMostOncePerSecond) {
  for (std::uint32_t pid = 1; pid <= 20; ++pid) slot(999, pid, 1);  // an unseen namespace
  procs_.refresh(*usage_, 1, 2, host_, 0);
  const int after_first = host_.scans;
  EXPECT_GE(after_first, 1);
  for (std::uint64_t t = 1; t < 10; ++t) procs_.refresh(*usage_, 1, 2, host_, t * 100 * kMs);
  EXPECT_EQ(host_.scans, after_first);
  procs_.refresh(*usage_, 1, 2, host_, AllocationProcesses::kRetryNs + 1);
  EXPECT_GT(host_.scans, after_first);
}

// A slot found dead is reclaimed at once, and a tenant can forge it again
// with a new identity at every pass (10 ms while it forges demand): new
// identities are judged (each judgement may scan /proc and read maps) within
// the allocation's budget, the rest wait for a later pass.
TEST_F(Verification, NewIdentitiesAreJudgedWithinTheBudget) {
  host_.process(5001, 77, 10, 1000);  // the namespace is visible
  int dead = 0;
  for (std::uint32_t pass = 0; pass < 200; ++pass) {  // 2 s of passes
    for (std::uint32_t k = 0; k < 4; ++k) slot(77, 100'000 + pass * 4 + k, 1);
    for (const auto& [index, verdict] : procs_.refresh(*usage_, 1, 2, host_, pass * 10 * kMs)) {
      if (verdict != SlotVerdict::kDead) continue;
      ++dead;
      (void)shm::reclaim_slot(*usage_, index, shm::SlotState::kActive);
    }
  }
  const double budget =
      AllocationProcesses::kJudgementBurst + 1.99 * AllocationProcesses::kJudgementsPerSecond;
  EXPECT_LE(dead, budget + 1);
  EXPECT_GE(dead, budget - 2);
  EXPECT_EQ(host_.scans, dead);  // every judgement here looked the identity up once
}

// More slots want judging than the budget allows (live processes that do
// not map the file, each judged again every second): they take turns, and
// every one is judged, not only the lowest indices.
TEST_F(Verification, SlotsShortOfTheBudgetTakeTurns) {
  for (std::uint32_t k = 0; k < 60; ++k) {
    host_.process(7000 + k, 77, 10 + k, 1000, /*maps_usage=*/false);
    slot(77, 10 + k, 1000);
  }
  for (std::uint64_t pass = 0; pass < 50; ++pass)
    procs_.refresh(*usage_, 1, 2, host_, pass * 100 * kMs);
  EXPECT_EQ(host_.maps_read.size(), 60u);
}

TEST_F(Verification, AVerifiedProcessIsDroppedWhenItDiesOrItsSlotChangesOwner) {
  host_.process(5001, 77, 10, 1000);
  host_.process(5002, 77, 12, 1200);
  const unsigned a = slot(77, 10, 1000);
  const unsigned b = slot(77, 12, 1200);
  procs_.refresh(*usage_, 1, 2, host_, 0);
  ASSERT_EQ(procs_.live(), 2u);
  host_.procs.erase(5001);                  // died
  usage_->slots[b].start_time.store(1201);  // the tenant rewrites the identity
  procs_.refresh(*usage_, 1, 2, host_, 100 * kMs);
  EXPECT_FALSE(procs_.verified().contains(a));
  EXPECT_FALSE(procs_.verified().contains(b));
}

// ---------------------------------------------------------------- ledger ----

TEST(LedgerCheck, RepairsADifferenceThatStaysAndOnlyThat) {
  LedgerCheck c;
  // Transient differences (a reservation between its two steps) come and go.
  EXPECT_FALSE(c.correction(100, 90));
  EXPECT_FALSE(c.correction(100, 100));
  EXPECT_FALSE(c.correction(100, 90));
  EXPECT_FALSE(c.correction(110, 90));
  // A zeroed ledger while 3 GiB are held: repaired on the third pass.
  EXPECT_FALSE(c.correction(0, 3ull << 30));
  EXPECT_FALSE(c.correction(0, 3ull << 30));
  auto fix = c.correction(0, 3ull << 30);
  ASSERT_TRUE(fix);
  EXPECT_EQ(*fix, 3ull << 30);
  // After the repair the count starts again.
  EXPECT_FALSE(c.correction(3ull << 30, 3ull << 30));
}

TEST(LedgerCheck, AWrappedLedgerIsBroughtBackByAdding) {
  LedgerCheck c;
  const std::uint64_t wrapped = 0ull - (1ull << 30);  // 2^64 - 1 GiB
  std::optional<std::uint64_t> fix;
  for (int i = 0; i < LedgerCheck::kStablePasses; ++i) fix = c.correction(wrapped, 0);
  ASSERT_TRUE(fix);
  EXPECT_EQ(wrapped + *fix, 0u);
}

TEST(LedgerCheck, SlotTotalSumsActiveSlotsOnly) {
  auto usage = std::make_unique<shm::UsageRegion>();
  shm::ProcessIdentity id{.pid = 1, .pidns_inode = 1, .start_time = 1};
  auto s = shm::claim_slot(*usage, id, 1);
  ASSERT_TRUE(s);
  shm::QuotaLedger ledger(*usage);
  ASSERT_TRUE(ledger.try_reserve(0, usage->slots[*s], 1000, 1ull << 40));
  ledger.charge_overhead(0, usage->slots[*s], 300);
  usage->slots[7].bytes[0].store(5555);  // a free slot's leftovers are not counted
  EXPECT_EQ(slot_total(*usage, 0), 1300u);
  EXPECT_EQ(slot_total(*usage, 1), 0u);
}

// ---------------------------------------------------------- ground truth ----

TEST(MemoryWatch, ActsAfterTheGraceAndThenWaitsAWholeGraceAgain) {
  MemoryWatch w(2000 * kMs);
  EXPECT_FALSE(w.observe(10, 20, 0));
  EXPECT_FALSE(w.over());
  EXPECT_FALSE(w.observe(30, 20, 100 * kMs));
  EXPECT_TRUE(w.over());
  EXPECT_FALSE(w.observe(30, 20, 2000 * kMs));
  EXPECT_TRUE(w.observe(30, 20, 2100 * kMs));
  EXPECT_FALSE(w.observe(30, 20, 3000 * kMs));
  EXPECT_TRUE(w.observe(30, 20, 4100 * kMs));
  // Back under the quota: the clock starts over.
  EXPECT_FALSE(w.observe(20, 20, 4200 * kMs));
  EXPECT_FALSE(w.observe(30, 20, 4300 * kMs));
  EXPECT_FALSE(w.observe(30, 20, 6200 * kMs));
  EXPECT_TRUE(w.observe(30, 20, 6300 * kMs));
  // Unlimited is never over.
  MemoryWatch u(0);
  EXPECT_FALSE(u.observe(~0ull - 1, ~0ull, 1));
}

TEST(BusyBalance, AnHonestTenantIsNeverChargedExtraNorFlagged) {
  BusyBalance b;
  for (int i = 0; i < 100; ++i) {
    // Leases charge wall time: the charge is at least the work.
    const auto v = b.observe(400 * kMs, 450 * kMs, 500 * kMs);
    EXPECT_EQ(v.charge_ns, 0u);
    EXPECT_FALSE(v.unleased);
  }
}

TEST(BusyBalance, AttributionLagWithinTheBankIsNotCharged) {
  BusyBalance b;
  // The charge runs ahead by 80 ms, then the work catches up.
  EXPECT_EQ(b.observe(420 * kMs, 500 * kMs, 500 * kMs).charge_ns, 0u);
  EXPECT_EQ(b.observe(500 * kMs, 420 * kMs, 500 * kMs).charge_ns, 0u);
}

TEST(BusyBalance, WorkBeyondTheChargeIsChargedAndSustainedWorkWithoutLeasesFlagged) {
  BusyBalance b;
  // A tenant that forged its drain marks: 100 ms a window more than charged.
  auto v = b.observe(350 * kMs, 250 * kMs, 500 * kMs);
  EXPECT_EQ(v.charge_ns, 100 * kMs);
  EXPECT_FALSE(v.unleased);  // within the margin (max(100 ms, window / 4) = 125 ms)
  // A bypass: 480 ms of GPU time in 500 ms, no lease at all.
  int flagged_at = 0;
  for (int i = 1; i <= BusyBalance::kUnleasedWindows; ++i) {
    v = b.observe(480 * kMs, 0, 500 * kMs);
    EXPECT_EQ(v.charge_ns, 480 * kMs);
    if (v.unleased && !flagged_at) flagged_at = i;
  }
  EXPECT_EQ(flagged_at, BusyBalance::kUnleasedWindows);
}

TEST(BusyBalance, IdleTheScaleMadeUpForIsNotBankedTwice) {
  // A capped tenant held to 1.25 x its cap in lease time, 20 % of it idle:
  // its charge at the scale is its GPU time, so nothing is banked, and GPU
  // time it takes without a lease next is charged whole.
  BusyBalance scaled, unscaled;
  EXPECT_EQ(scaled.observe(200 * kMs, 250 * kMs, 500 * kMs, 1.25).charge_ns, 0u);
  EXPECT_EQ(unscaled.observe(200 * kMs, 250 * kMs, 500 * kMs).charge_ns, 0u);
  EXPECT_EQ(scaled.observe(300 * kMs, 200 * kMs, 500 * kMs, 1.25).charge_ns, 140 * kMs);
  EXPECT_EQ(unscaled.observe(300 * kMs, 200 * kMs, 500 * kMs).charge_ns, 50 * kMs);
}

TEST(BusyBalance, GpuTimeTheScaleLetThroughBeyondTheCapIsChargedButNotFlagged) {
  // Its idle stopped while the scale was still up: its leases were all GPU
  // time, 25 % beyond what its cap allows.
  BusyBalance b;
  for (int i = 0; i < 2 * BusyBalance::kUnleasedWindows; ++i) {
    const auto v = b.observe(500 * kMs, 500 * kMs, 500 * kMs, 1.25);
    EXPECT_EQ(v.charge_ns, 100 * kMs);
    EXPECT_FALSE(v.unleased);
  }
}

TEST(LeaseBusyRatio, FollowsTheLeaseTimePerNsOfGpuTime) {
  LeaseBusyRatio r;
  EXPECT_EQ(r.scale(), 1.0);
  for (int i = 0; i < 20; ++i) r.observe(150 * kMs, 165 * kMs, 500 * kMs);
  EXPECT_NEAR(r.scale(), 1.1, 1e-9);
  // The tenant's leases fill up: the scale follows within a few windows.
  for (int i = 0; i < 20; ++i) r.observe(150 * kMs, 150 * kMs, 500 * kMs);
  EXPECT_NEAR(r.scale(), 1.0, 0.01);
}

TEST(LeaseBusyRatio, NeverBelowOneNorAboveItsBound) {
  LeaseBusyRatio r;
  for (int i = 0; i < 20; ++i) r.observe(200 * kMs, 150 * kMs, 500 * kMs);  // work past the charge
  EXPECT_EQ(r.scale(), 1.0);
  for (int i = 0; i < 40; ++i) r.observe(20 * kMs, 150 * kMs, 500 * kMs);  // leases held idle
  EXPECT_EQ(r.scale(), LeaseBusyRatio::kMaxScale);
}

TEST(LeaseBusyRatio, WindowsThatSayLittleAreLeftOut) {
  LeaseBusyRatio r;
  for (int i = 0; i < 2; ++i) r.observe(100 * kMs, 110 * kMs, 500 * kMs);
  const double before = r.scale();
  ASSERT_NEAR(before, 1.1, 1e-9);
  r.observe(0, 150 * kMs, 500 * kMs);      // NVML shows none of its processes
  r.observe(1 * kMs, 5 * kMs, 500 * kMs);  // hardly charged
  r.observe(100 * kMs, -20, 500 * kMs);    // refunds took back more than the window charged
  EXPECT_EQ(r.scale(), before);
}

// A restarted daemon's first window charged leases the tenants' processes
// did not use yet (they woke from their local duty cycle): 177 ms against
// NVML's 129 for a cap of 30 (samples tiling time), which read as the bound
// and let the tenant run at 35 % until the backstop charged it back.
TEST(LeaseBusyRatio, TheFirstWindowWithFiguresIsLeftOut) {
  LeaseBusyRatio r;
  r.observe(129 * kMs, 177 * kMs, 500 * kMs);
  EXPECT_EQ(r.scale(), 1.0);
  r.observe(160 * kMs, 161 * kMs, 500 * kMs);
  EXPECT_NEAR(r.scale(), 161.0 / 160.0, 1e-9);
}

TEST(ChargedBetween, RefundsChargeNothingAndAComebackChargesItsWholeNewRun) {
  constexpr std::int64_t ms = 1'000'000;
  EXPECT_EQ(charged_between({1, 300 * kMs}, {1, 420 * kMs}), 120 * ms);
  // Refunds took back more than the window charged: not a comeback, and
  // the backstop sees the window's usage beyond a negative charge.
  EXPECT_EQ(charged_between({1, 300 * kMs}, {1, 280 * kMs}), -20 * ms);
  BusyBalance b;
  EXPECT_EQ(
      b.observe(150 * kMs, charged_between({1, 300 * kMs}, {1, 280 * kMs}), 500 * kMs).charge_ns,
      170 * kMs);
  // Left and came back: everything the new run was charged is the window's.
  EXPECT_EQ(charged_between({1, 300 * kMs}, {2, 40 * kMs}), 40 * ms);
  EXPECT_EQ(charged_between({1, 30 * kMs}, {2, 40 * kMs}), 40 * ms);
}

TEST(CarriedBusy, AForgedFigureIsHeldToWhatTheDaemonOwnedCountersAllow) {
  const CarriedCounters owned{.granted_ns = 900 * kMs, .grants = 3, .unleased_ns = 50 * kMs};
  EXPECT_EQ(carried_busy_ns(700 * kMs, owned, 100 * kMs), 700 * kMs);  // as published
  // Leases, three overruns up to the drain bound, ground truth's charges.
  EXPECT_EQ(carried_busy_ns(3'600'000 * kMs, owned, 100 * kMs), 1250 * kMs);
  EXPECT_EQ(
      carried_busy_ns(UINT64_MAX, {.granted_ns = UINT64_MAX - 1, .grants = UINT64_MAX}, 100 * kMs),
      UINT64_MAX);                                         // saturates, never wraps
  EXPECT_EQ(carried_busy_ns(5 * kMs, {}, 100 * kMs), 0u);  // never granted anything
}

TEST(YoungestUser, PicksTheLastStartedProcessThatUsesAny) {
  std::vector<ProcessUse> p = {{10, 100, 5}, {11, 300, 0}, {12, 200, 7}};
  EXPECT_EQ(youngest_user(p)->host_pid, 12u);
  p[1].amount = 1;
  EXPECT_EQ(youngest_user(p)->host_pid, 11u);
  EXPECT_FALSE(youngest_user(std::vector<ProcessUse>{{1, 1, 0}}));
  EXPECT_EQ(parse_over_quota_action("kill"), OverQuotaAction::kKill);
  EXPECT_EQ(parse_over_quota_action("log"), OverQuotaAction::kLog);
  EXPECT_FALSE(parse_over_quota_action("Kill"));
}

}  // namespace
}  // namespace cushare::sched
