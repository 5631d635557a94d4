// The quota ledger: single-process semantics, then 16 racing processes with
// an observer, then kill -9 mid-run and racing reclaimers.
#include "shm/quota_ledger.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <random>
#include <vector>

#include "shm/process_slots.hpp"
#include "shm/region_file.hpp"
#include "test_util.hpp"

namespace cushare::shm {
namespace {

using test::fork_child;
using test::SharedMem;
using test::TempDir;
using test::wait_child;

constexpr std::uint64_t kMi = 1024 * 1024;

ProcessIdentity me() {
  auto id = self_identity();
  if (!id) throw std::runtime_error(id.error());
  return *id;
}

TEST(ShmLedger, ReserveReleaseAgainstLimit) {
  auto usage = std::make_unique<UsageRegion>();
  ProcessSlot& slot = usage->slots[0];
  QuotaLedger ledger(*usage);
  EXPECT_TRUE(ledger.try_reserve(2, slot, 60, 100));
  EXPECT_TRUE(ledger.try_reserve(2, slot, 40, 100));  // exactly at the limit
  EXPECT_FALSE(ledger.try_reserve(2, slot, 1, 100));
  EXPECT_EQ(ledger.used(2), 100u);
  EXPECT_EQ(slot.bytes[2].load(), 100u);
  ledger.release(2, slot, 60);
  EXPECT_EQ(ledger.used(2), 40u);
  EXPECT_EQ(slot.bytes[2].load(), 40u);
  EXPECT_EQ(ledger.used(0), 0u);
  // No overflow tricks: a huge request never wraps the total.
  EXPECT_FALSE(ledger.try_reserve(2, slot, UINT64_MAX - 10, 100));
  EXPECT_FALSE(ledger.try_reserve(2, slot, UINT64_MAX - 10, kUnlimited));
  EXPECT_TRUE(ledger.try_reserve(3, slot, 1ull << 62, kUnlimited));
  EXPECT_EQ(ledger.used(2), 40u);
  // A limit lowered below current use refuses everything until memory is freed.
  EXPECT_FALSE(ledger.try_reserve(2, slot, 1, 30));
}

TEST(ShmLedger, AReplacedOverheadLosesToTheOwnersChargeSinceTheMeasurement) {
  auto usage = std::make_unique<UsageRegion>();
  ProcessSlot& slot = usage->slots[1];
  slot.state.store(static_cast<std::uint32_t>(SlotState::kActive));
  QuotaLedger ledger(*usage);
  ledger.charge_overhead(0, slot, 300);
  const std::uint64_t measured_against = slot.overhead[0].load();
  EXPECT_TRUE(ledger.try_charge_overhead(0, slot, 200, 1000));  // a context reserved meanwhile
  EXPECT_FALSE(ledger.replace_overhead(0, slot, measured_against, 250));
  EXPECT_EQ(ledger.used(0), 500u) << "the reservation is kept";
  EXPECT_TRUE(ledger.replace_overhead(0, slot, 500, 450));
  EXPECT_EQ(ledger.used(0), 450u);
  EXPECT_EQ(slot.overhead[0].load(), 450u);
}

TEST(ShmLedger, OverheadChargingMovesTotalByDelta) {
  auto usage = std::make_unique<UsageRegion>();
  ProcessSlot& slot = usage->slots[5];
  slot.state.store(static_cast<std::uint32_t>(SlotState::kActive));
  QuotaLedger ledger(*usage);
  ASSERT_TRUE(ledger.try_reserve(0, slot, 500, 1000));
  EXPECT_TRUE(ledger.try_charge_overhead(0, slot, 300, 1000));
  EXPECT_FALSE(ledger.try_charge_overhead(0, slot, 300, 1000));
  EXPECT_EQ(ledger.used(0), 800u);
  EXPECT_EQ(ledger.set_overhead(0, slot, 450), 300u);  // measured more than estimated
  EXPECT_EQ(ledger.used(0), 950u);
  EXPECT_EQ(ledger.set_overhead(0, slot, 100), 450u);  // and less
  EXPECT_EQ(ledger.used(0), 600u);
  EXPECT_EQ(slot.overhead[0].load(), 100u);
  ledger.charge_overhead(0, slot, 1000);  // may exceed the quota: it is real memory
  EXPECT_EQ(ledger.used(0), 1600u);
  EXPECT_FALSE(ledger.try_reserve(0, slot, 1, 1000));
  EXPECT_EQ(release_slot(*usage, 5), std::optional<std::uint64_t>(1600u));
  EXPECT_EQ(ledger.used(0), 0u);
}

// A context's reservation given back (or settled lower) after the daemon
// replaced the slot's overhead with a smaller measurement: never below zero.
TEST(ShmLedger, ReleasingOverheadNeverGoesBelowZero) {
  auto usage = std::make_unique<UsageRegion>();
  ProcessSlot& slot = usage->slots[0];
  QuotaLedger ledger(*usage);
  ASSERT_TRUE(ledger.try_charge_overhead(0, slot, 300, 1000));
  ASSERT_TRUE(ledger.try_reserve(0, slot, 200, 1000));
  EXPECT_EQ(ledger.release_overhead(0, slot, 100), 100u);
  EXPECT_EQ(slot.overhead[0].load(), 200u);
  EXPECT_EQ(ledger.used(0), 400u);
  ledger.set_overhead(0, slot, 50);  // the daemon's smaller measurement
  EXPECT_EQ(ledger.release_overhead(0, slot, 300), 50u);
  EXPECT_EQ(slot.overhead[0].load(), 0u);
  EXPECT_EQ(ledger.used(0), 200u);  // the allocation's bytes stay
}

struct Stress {
  std::atomic<int> start;
  std::atomic<int> stop_observer;
  std::atomic<std::uint64_t> observer_samples;
  std::atomic<std::uint64_t> observer_max;
  std::atomic<std::uint64_t> observer_violations;
  std::atomic<std::uint64_t> successes;
  std::atomic<std::uint64_t> refusals;
  std::atomic<std::uint64_t> held[16];  // each worker's live reservations at its end
  std::atomic<std::int32_t> slot_of[16];
  std::atomic<std::uint64_t> ops_done[16];
};

// One worker: claims a slot, random reserve/release for `ops` operations (0 =
// until killed), keeps what it holds at the end (it "exits" holding memory).
int worker(UsageRegion& usage, Stress& sh, int w, std::uint64_t quota, std::uint64_t ops,
           unsigned gpu) {
  auto slot_index = claim_slot(usage, me(), 1);
  if (!slot_index) return 3;
  sh.slot_of[w].store(static_cast<std::int32_t>(*slot_index));
  ProcessSlot& slot = usage.slots[*slot_index];
  QuotaLedger ledger(usage);
  std::mt19937_64 rng(1234 + w);
  std::vector<std::uint64_t> live;
  std::uint64_t held = 0;
  while (sh.start.load() == 0) {
  }
  for (std::uint64_t i = 0; ops == 0 || i < ops; ++i) {
    const bool reserve = live.empty() || rng() % 100 < 55;
    if (reserve) {
      const std::uint64_t bytes = 1 + rng() % (quota / 8);
      if (ledger.try_reserve(gpu, slot, bytes, quota)) {
        live.push_back(bytes);
        held += bytes;
        sh.successes.fetch_add(1, std::memory_order_relaxed);
      } else {
        sh.refusals.fetch_add(1, std::memory_order_relaxed);
      }
    } else {
      const std::size_t k = rng() % live.size();
      ledger.release(gpu, slot, live[k]);
      held -= live[k];
      live[k] = live.back();
      live.pop_back();
    }
    sh.ops_done[w].store(i + 1, std::memory_order_relaxed);
  }
  sh.held[w].store(held);
  return slot.bytes[gpu].load() == held ? 0 : 4;
}

pid_t start_observer(UsageRegion& usage, Stress& sh, unsigned gpu, std::uint64_t quota) {
  return fork_child([&usage, &sh, gpu, quota] {
    std::uint64_t max = 0, n = 0, bad = 0;
    while (sh.stop_observer.load() == 0) {
      const std::uint64_t v = usage.gpus[gpu].used_bytes.load(std::memory_order_acquire);
      if (v > quota) ++bad;
      if (v > max) max = v;
      ++n;
    }
    sh.observer_samples.store(n);
    sh.observer_max.store(max);
    sh.observer_violations.store(bad);
    return 0;
  });
}

TEST(ShmLedgerMultiProcess, SixteenProcessesNeverExceedQuota) {
  TempDir dir;
  auto m = UsageMapping::create(dir / "usage", {"stress"});
  UsageRegion& usage = m.mutable_region();
  SharedMem<Stress> sh;
  constexpr unsigned kGpu = 3;
  constexpr std::uint64_t kQuota = 64 * kMi;
  const pid_t observer = start_observer(usage, *sh, kGpu, kQuota);
  std::vector<pid_t> workers;
  workers.reserve(16);
  for (int w = 0; w < 16; ++w)
    workers.push_back(fork_child([&, w] { return worker(usage, *sh, w, kQuota, 10000, kGpu); }));
  sh->start.store(1);
  for (pid_t p : workers) EXPECT_EQ(wait_child(p), 0);
  sh->stop_observer.store(1);
  EXPECT_EQ(wait_child(observer), 0);

  EXPECT_GT(sh->observer_samples.load(), 0u);
  EXPECT_EQ(sh->observer_violations.load(), 0u) << "max seen " << sh->observer_max.load();
  EXPECT_LE(sh->observer_max.load(), kQuota);
  EXPECT_GT(sh->refusals.load(), 0u) << "the quota was never contended: test too weak";

  std::uint64_t held = 0, in_slots = 0;
  for (int w = 0; w < 16; ++w) {
    held += sh->held[w].load();
    in_slots += usage.slots[sh->slot_of[w].load()].bytes[kGpu].load();
  }
  EXPECT_EQ(usage.gpus[kGpu].used_bytes.load(), held);
  EXPECT_EQ(in_slots, held);
  EXPECT_LE(held, kQuota);
  for (unsigned g = 0; g < kMaxGpus; ++g)
    if (g != kGpu) {
      EXPECT_EQ(usage.gpus[g].used_bytes.load(), 0u);
    }

  // The workers exited without releasing: they are dead now, reclaim returns it all.
  const auto checker = LivenessChecker::same_namespace(me().pidns_inode);
  const auto r = reclaim_dead_slots(usage, checker);
  EXPECT_EQ(r.slots, 16u);
  EXPECT_EQ(r.bytes, held);
  EXPECT_EQ(usage.gpus[kGpu].used_bytes.load(), 0u);
}

TEST(ShmLedgerCrash, KilledProcessesAreReclaimedExactlyOnce) {
  TempDir dir;
  auto m = UsageMapping::create(dir / "usage", {"crash"});
  UsageRegion& usage = m.mutable_region();
  SharedMem<Stress> sh;
  constexpr unsigned kGpu = 0;
  constexpr std::uint64_t kQuota = 32 * kMi;
  constexpr int kWorkers = 16;
  const pid_t observer = start_observer(usage, *sh, kGpu, kQuota);
  std::vector<pid_t> workers;
  for (int w = 0; w < kWorkers; ++w) {
    sh->slot_of[w].store(-1);
    // Even workers run until killed; odd ones finish 10,000 operations.
    const std::uint64_t ops = (w % 2 == 0) ? 0 : 10000;
    workers.push_back(fork_child([&, w, ops] { return worker(usage, *sh, w, kQuota, ops, kGpu); }));
  }
  sh->start.store(1);
  // Kill the endless workers mid-run, once each has done real work.
  for (int w = 0; w < kWorkers; w += 2) {
    while (sh->ops_done[w].load() < 2000) {
    }
    kill(workers[w], SIGKILL);
  }
  for (int w = 0; w < kWorkers; ++w) {
    const int rc = wait_child(workers[w]);
    EXPECT_EQ(rc, w % 2 == 0 ? -SIGKILL : 0) << "worker " << w;
  }

  // What the dead slots hold now (stable: their owners are gone).
  std::uint64_t dead_bytes = 0, live_bytes = 0;
  for (int w = 0; w < kWorkers; ++w) {
    const auto b = usage.slots[sh->slot_of[w].load()].bytes[kGpu].load();
    (w % 2 == 0 ? dead_bytes : live_bytes) += b;
  }
  const std::uint64_t total_before = usage.gpus[kGpu].used_bytes.load();
  // A process killed between the total and slot updates leaves the total high
  // by at most one allocation (fail closed); never low.
  ASSERT_GE(total_before, dead_bytes + live_bytes);
  const std::uint64_t leak = total_before - dead_bytes - live_bytes;
  EXPECT_LE(leak, (kWorkers / 2) * (kQuota / 8));

  // The odd workers exited normally too; mark them alive by giving their slots
  // to a live process (this one) so only the killed ones are judged dead.
  const auto self = me();
  for (int w = 1; w < kWorkers; w += 2) {
    ProcessSlot& s = usage.slots[sh->slot_of[w].load()];
    s.pid.store(self.pid);
    s.start_time.store(self.start_time);
  }

  // Four reclaimers race over the same region.
  struct Reclaimed {
    std::atomic<int> go;
    std::atomic<std::uint64_t> bytes[4];
    std::atomic<unsigned> slots[4];
  };
  SharedMem<Reclaimed> rec;
  std::vector<pid_t> reclaimers;
  reclaimers.reserve(4);
  for (int r = 0; r < 4; ++r) {
    reclaimers.push_back(fork_child([&, r] {
      const auto checker = LivenessChecker::same_namespace(me().pidns_inode);
      while (rec->go.load() == 0) {
      }
      const auto res = reclaim_dead_slots(usage, checker);
      rec->bytes[r].store(res.bytes);
      rec->slots[r].store(res.slots);
      return 0;
    }));
  }
  rec->go.store(1);
  std::uint64_t reclaimed = 0;
  unsigned slots = 0;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(wait_child(reclaimers[r]), 0);
    reclaimed += rec->bytes[r].load();
    slots += rec->slots[r].load();
  }
  EXPECT_EQ(slots, static_cast<unsigned>(kWorkers / 2));
  EXPECT_EQ(reclaimed, dead_bytes);
  EXPECT_EQ(usage.gpus[kGpu].used_bytes.load(), live_bytes + leak);
  for (int w = 0; w < kWorkers; ++w) {
    const ProcessSlot& s = usage.slots[sh->slot_of[w].load()];
    EXPECT_EQ(slot_state(s), w % 2 == 0 ? SlotState::kFree : SlotState::kActive) << w;
    if (w % 2 == 0) {
      EXPECT_EQ(s.bytes[kGpu].load(), 0u);
    }
  }
  // A second round finds nothing more.
  const auto again = reclaim_dead_slots(usage, LivenessChecker::same_namespace(self.pidns_inode));
  EXPECT_EQ(again.slots, 0u);

  sh->stop_observer.store(1);
  EXPECT_EQ(wait_child(observer), 0);
  EXPECT_EQ(sh->observer_violations.load(), 0u);
}

}  // namespace
}  // namespace cushare::shm
