// The daemon against real region files in a temp run dir, driven tick by
// tick with an injected clock: discovery, lease publishing, revocation of a
// removed allocation, reclaim of a dead process's slot and its bytes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "scheduler/daemon.hpp"
#include "shm/clock.hpp"
#include "shm/limits_seqlock.hpp"
#include "shm/process_slots.hpp"
#include "shm/quota_ledger.hpp"
#include "shm/region_file.hpp"

namespace cushare::sched {
namespace {
namespace fs = std::filesystem;

constexpr std::uint64_t kMs = 1'000'000;

class DaemonTick : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cushare-daemon-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  struct Alloc {
    shm::LimitsMapping limits;
    shm::UsageMapping usage;
  };
  Alloc make_alloc(const std::string& id, std::uint32_t pct, shm::ComputeMode mode) {
    const fs::path dir = root_ / "alloc" / id;
    fs::create_directories(dir);
    shm::RegionCreateOptions opts{.alloc_id = id};
    auto limits = shm::LimitsMapping::create(dir / "limits", opts, [&](shm::LimitsRegion& r) {
      shm::GpuLimitsSnapshot v;
      v.compute_limit_pct = pct;
      v.weight = pct;
      v.mode = mode;
      v.memory_limit_bytes = 1ull << 30;
      shm::init_gpu_entry(r, 0, "GPU-test-0", v);
    });
    auto usage = shm::UsageMapping::create(dir / "usage", opts,
                                           [](shm::UsageRegion& r) { r.gpu_count.store(1); });
    return {std::move(limits), std::move(usage)};
  }
  // This test process claims a slot of `a` (a live process of it) and, with
  // `waiting`, waits at its gate for the lease.
  static void join(Alloc& a, bool waiting = true) {
    auto self = shm::self_identity();
    ASSERT_TRUE(self.has_value());
    ASSERT_TRUE(shm::claim_slot(a.usage.mutable_region(), *self, 1).has_value());
    if (waiting) a.usage.mutable_region().gpus[0].demand.store(1);
  }
  DaemonConfig config() {
    DaemonConfig c;
    c.run_dir = root_;
    return c;
  }
  fs::path root_;
};

TEST_F(DaemonTick, GrantsTheLeaseToAWaitingTenantAndKeepsTheHeartbeat) {
  Daemon daemon(config());
  auto a = make_alloc("a", 50, shm::ComputeMode::kBurst);
  join(a);

  std::uint64_t now = shm::monotonic_ns();
  daemon.tick(now);
  daemon.tick(now + kMs);
  const auto& g = a.limits.region().gpus[0];
  EXPECT_EQ(g.lease_holder.load(), 1u);
  EXPECT_GT(g.lease_expiry_ns.load(), now + kMs);
  EXPECT_GT(g.lease_futex.load(), 0u);
  EXPECT_EQ(a.limits.region().daemon_pid.load(), static_cast<std::uint32_t>(getpid()));
  EXPECT_GE(a.limits.region().daemon_heartbeat_ns.load(), now);
  // The slot got its host PID (same namespace here: our own pid).
  bool mapped = false;
  for (const auto& s : a.usage.region().slots) {
    mapped |= s.host_pid.load() == static_cast<std::uint32_t>(getpid());
  }
  EXPECT_TRUE(mapped);
  // Figures are published for cusharectl and metrics.
  daemon.tick(now + 200 * kMs);
  EXPECT_EQ(g.share_target_ppm.load(), 1'000'000u);
  const auto m = daemon.metrics();
  ASSERT_EQ(m->daemon.tenants.size(), 1u);
  EXPECT_EQ(m->daemon.tenants[0].allocation, "a");
  ASSERT_EQ(m->allocations.size(), 1u);
  EXPECT_EQ(m->allocations[0].gpus[0].memory_limit_bytes, 1ull << 30);
}

// The metrics render the regions as the daemon left them, read through the
// node read model, except the GPU time the daemon attributed: the usage
// region's copy of it is the tenant's to overwrite.
TEST_F(DaemonTick, MetricsAreTheRegionsItPublishedPlusItsOwnFigures) {
  Daemon daemon(config());
  auto a = make_alloc("a", 50, shm::ComputeMode::kCapped);
  join(a);
  a.usage.mutable_region().gpus[0].launches.store(42);
  std::uint64_t now = shm::monotonic_ns();
  for (int i = 0; i < 40; ++i) daemon.tick(now += 5 * kMs);
  const auto& g = a.limits.region().gpus[0];
  ASSERT_GT(g.lease_grants.load(), 0u);
  const std::uint64_t busy = a.usage.region().gpus[0].busy_ns.load();
  a.usage.mutable_region().gpus[0].busy_ns.store(busy + 3'600'000'000'000);  // forged
  const std::string text = render_prometheus(*daemon.metrics());
  const std::string labels =
      R"({allocation="a",gpu="",UUID="GPU-test-0",pod="",namespace="",container=""})";
  auto has = [&](const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << " not in:\n" << text;
  };
  has("cushare_lease_grants_total" + labels + " " + std::to_string(g.lease_grants.load()));
  has("cushare_launches_total" + labels + " 42");
  has("cushare_compute_mode_info" + labels.substr(0, labels.size() - 1) + ",mode=\"capped\"} 1");
  has("cushare_share_target_ratio" + labels + " 0.5");  // capped at 50 %
  has("cushare_processes" + labels + " 1");
  has("cushare_usage_region_valid" + labels + " 1");
  has("cushare_allocations 1");
  has("cushare_gpu_time_seconds_total" + labels + " " + fmt::format("{}", busy / 1e9));
}

// A refund takes charged time back (attributed_ns goes down); that is not a
// tenant leaving and coming back, whose counters restart from zero. Read as
// one, the published GPU time counted the tenant's time twice.
TEST_F(DaemonTick, PublishedGpuTimeOnlyGrowsAndNeverExceedsTheWallTime) {
  Daemon daemon(config());
  auto a = make_alloc("a", 50, shm::ComputeMode::kBurst);
  join(a);
  auto& gu = a.usage.mutable_region().gpus[0];
  const std::uint64_t start = shm::monotonic_ns();
  std::uint64_t now = start;
  std::uint64_t last = 0;
  // `submitting`: it launches on every tick and its queue drains at once.
  auto tick_for = [&](std::uint64_t span, bool submitting) {
    for (const std::uint64_t end = now + span; now < end;) {
      now += 5 * kMs;
      if (submitting) {
        gu.last_submit_ns.store(now);
        gu.drained_ns.store(now);
      }
      daemon.tick(now);
      const std::uint64_t busy = gu.busy_ns.load();
      EXPECT_GE(busy, last) << "a published counter went backwards";
      EXPECT_LE(busy, now - start) << "more GPU time than wall time";
      last = busy;
    }
  };
  tick_for(20 * kMs, false);  // granted
  gu.demand.store(0);
  tick_for(300 * kMs, true);  // uses its lease, charged as it goes
  ASSERT_GT(last, 100 * kMs);
  tick_for(150 * kMs, false);                      // gives the lease back for idleness
  gu.idle_ns.store(gu.idle_ns.load() + 20 * kMs);  // its gate reports an idle gap
  tick_for(200 * kMs, false);
}

// The metrics thread renders while the loop ticks, allocations come and go
// (meant for the TSan build: the snapshot is all it shares).
TEST_F(DaemonTick, MetricsAreRenderedWhileItTicks) {
  Daemon daemon(config());
  auto a = make_alloc("a", 50, shm::ComputeMode::kBurst);
  std::atomic<bool> done{false};
  std::size_t renders = 0;
  // At least one render whenever the thread gets a CPU (on a loaded host the
  // loop may be done before it runs at all).
  std::thread scraper([&] {
    do {
      const std::string text = render_prometheus(*daemon.metrics());
      renders += text.empty() ? 0 : 1;
    } while (!done.load());
  });
  std::uint64_t now = shm::monotonic_ns();
  for (int i = 0; i < 30; ++i) {
    if (i == 10) make_alloc("b", 50, shm::ComputeMode::kCapped);
    if (i == 20) fs::remove_all(root_ / "alloc" / "b");
    daemon.tick(now += 100 * kMs);
  }
  done.store(true);
  scraper.join();
  EXPECT_GT(renders, 0u);
  EXPECT_EQ(daemon.metrics()->allocations.size(), 1u);
}

TEST_F(DaemonTick, TwoTenantsAlternateAndARemovedOneLosesTheLease) {
  Daemon daemon(config());
  auto a = make_alloc("a", 50, shm::ComputeMode::kBurst);
  auto b = make_alloc("b", 50, shm::ComputeMode::kBurst);
  auto self = shm::self_identity();
  ASSERT_TRUE(self.has_value());
  for (auto* x : {&a, &b}) {
    ASSERT_TRUE(shm::claim_slot(x->usage.mutable_region(), *self, 1).has_value());
    x->usage.mutable_region().gpus[0].demand.store(1);
  }
  std::uint64_t now = shm::monotonic_ns();
  daemon.tick(now);
  const auto holder = [&] {
    return std::make_pair(a.limits.region().gpus[0].lease_holder.load(),
                          b.limits.region().gpus[0].lease_holder.load());
  };
  const auto first = holder();
  EXPECT_EQ(first.first + first.second, 1u) << "exactly one holder";
  now += 11 * kMs;  // past the quantum: the other one's turn
  daemon.tick(now);
  const auto second = holder();
  EXPECT_EQ(second.first + second.second, 1u);
  EXPECT_NE(first, second);
  // The holder's folder disappears: its lease words are cleared at once and
  // the other gets the GPU.
  const bool a_holds = second.first == 1;
  fs::remove_all(root_ / "alloc" / (a_holds ? "a" : "b"));
  now += 1 * kMs;
  daemon.tick(now + 2'000 * kMs);  // past the periodic rescan
  auto& other = a_holds ? b : a;
  EXPECT_EQ(other.limits.region().gpus[0].lease_holder.load(), 1u);
}

TEST_F(DaemonTick, ReclaimsTheSlotAndBytesOfADeadProcess) {
  Daemon daemon(config());
  auto a = make_alloc("a", 100, shm::ComputeMode::kBurst);
  // A child that claims a slot, reserves memory, and dies without releasing.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto self = shm::self_identity();
    auto& usage = a.usage.mutable_region();
    auto slot = shm::claim_slot(usage, *self, 1);
    if (!slot) _exit(1);
    shm::QuotaLedger(usage).try_reserve(0, usage.slots[*slot], 4096, shm::kUnlimited);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ASSERT_EQ(a.usage.region().gpus[0].used_bytes.load(), 4096u);
  daemon.tick(shm::monotonic_ns());
  EXPECT_EQ(a.usage.region().gpus[0].used_bytes.load(), 0u) << "bytes of the dead process returned";
  for (const auto& s : a.usage.region().slots) EXPECT_EQ(shm::slot_state(s), shm::SlotState::kFree);
}

// Demand written into a usage region whose slots hold no live process of the
// allocation is the tenant's word alone: it never gets a lease.
TEST_F(DaemonTick, ForgedDemandWithoutALiveProcessGetsNoLease) {
  Daemon daemon(config());
  auto a = make_alloc("a", 100, shm::ComputeMode::kBurst);
  auto& usage = a.usage.mutable_region();
  usage.gpus[0].demand.store(5);
  // A slot with a made-up identity and the daemon's own PID as "host PID".
  shm::ProcessIdentity forged{.pid = 4'000'000, .pidns_inode = 12345, .start_time = 1};
  auto slot = shm::claim_slot(usage, forged, 1);
  ASSERT_TRUE(slot.has_value());
  usage.slots[*slot].host_pid.store(static_cast<std::uint32_t>(getpid()));
  std::uint64_t now = shm::monotonic_ns();
  for (int i = 0; i < 50; ++i) daemon.tick(now += 5 * kMs);
  EXPECT_EQ(a.limits.region().gpus[0].lease_holder.load(), 0u);
  EXPECT_EQ(usage.slots[*slot].host_pid.load(), 0u) << "the forged host PID is not kept";
  const auto m = daemon.metrics();
  ASSERT_EQ(m->daemon.tenants.size(), 1u);
  EXPECT_EQ(m->daemon.tenants[0].processes, 0u);
}

TEST_F(DaemonTick, AZeroedLedgerIsRepairedFromTheLiveSlots) {
  Daemon daemon(config());
  auto a = make_alloc("a", 100, shm::ComputeMode::kBurst);
  auto& usage = a.usage.mutable_region();
  auto self = shm::self_identity();
  auto slot = shm::claim_slot(usage, *self, 1);
  ASSERT_TRUE(slot.has_value());
  ASSERT_TRUE(shm::QuotaLedger(usage).try_reserve(0, usage.slots[*slot], 3ull << 30, 4ull << 30));
  usage.gpus[0].used_bytes.store(0);  // the tenant zeroes its ledger
  std::uint64_t now = shm::monotonic_ns();
  for (int i = 0; i < 10; ++i) daemon.tick(now += 150 * kMs);  // a few housekeeping passes
  EXPECT_EQ(usage.gpus[0].used_bytes.load(), 3ull << 30);
  // Released afterwards, it comes back to zero instead of wrapping.
  shm::QuotaLedger(usage).release(0, usage.slots[*slot], 3ull << 30);
  EXPECT_EQ(usage.gpus[0].used_bytes.load(), 0u);
}

// The allocation's processes can resize, truncate or replace their usage file
// under the daemon: the daemon keeps running, keeps the allocation (its
// limits), gives it no GPU time while the file is not valid, and takes the
// file back when it is.
TEST_F(DaemonTick, AResizedOrReplacedUsageFileNeitherCrashesNorFreesTheAllocation) {
  Daemon daemon(config());
  auto a = make_alloc("a", 30, shm::ComputeMode::kBurst);
  auto self = shm::self_identity();
  ASSERT_TRUE(shm::claim_slot(a.usage.mutable_region(), *self, 1).has_value());
  a.usage.mutable_region().gpus[0].demand.store(1);
  std::uint64_t now = shm::monotonic_ns();
  daemon.tick(now);
  daemon.tick(now += kMs);
  ASSERT_EQ(a.limits.region().gpus[0].lease_holder.load(), 1u);
  const fs::path usage = root_ / "alloc" / "a" / "usage";
  const auto size = fs::file_size(usage);
  for (int round = 0; round < 20; ++round) {
    fs::resize_file(usage, round % 2 ? size + 1 : size / 2);
    daemon.tick(now += 20 * kMs);
    EXPECT_EQ(a.limits.region().gpus[0].lease_holder.load(), 0u) << round;
    EXPECT_EQ(daemon.metrics()->allocations.size(), 1u);
  }
  ASSERT_EQ(daemon.metrics()->daemon.tenants.size(), 1u);
  EXPECT_FALSE(daemon.metrics()->allocations[0].has_usage);
  // Replaced by a symbolic link to a valid region elsewhere: not followed.
  fs::remove(usage);
  { shm::UsageMapping::create(root_ / "elsewhere", {.alloc_id = "x"}); }
  fs::create_symlink(root_ / "elsewhere", usage);
  for (int i = 0; i < 5; ++i) daemon.tick(now += 20 * kMs);
  EXPECT_EQ(a.limits.region().gpus[0].lease_holder.load(), 0u);
  // A valid file again (the mapping in this test is of the old inode: a new
  // process would map the new one).
  fs::remove(usage);
  auto fresh = shm::UsageMapping::create(usage, {.alloc_id = "a"},
                                         [](shm::UsageRegion& r) { r.gpu_count.store(1); });
  ASSERT_TRUE(shm::claim_slot(fresh.mutable_region(), *self, 1).has_value());
  fresh.mutable_region().gpus[0].demand.store(1);
  for (int i = 0; i < 5; ++i) daemon.tick(now += 20 * kMs);
  EXPECT_EQ(a.limits.region().gpus[0].lease_holder.load(), 1u);
}

// The next holder's ready window, through the regions: a daemon on a host
// with a CPU to spare names the tenant a hand-off is near for in its limits
// region (ready_gpus, ready_until_ns) and wakes its sleeping threads once,
// before the grant; granted, it is no longer named. Where no CPU is idle, or
// on a region an earlier daemon left a window in, nobody is named.
class ReadyWindows : public DaemonTick {
 protected:
  // A /proc of its own: the host's processes (and "self") through links,
  // and a `stat` whose CPU counters the test writes.
  DaemonConfig windows_config() {
    const fs::path proc = root_ / "proc";
    fs::create_directories(proc);
    const std::string pid = std::to_string(getpid());
    fs::create_symlink("/proc/" + pid, proc / pid);
    fs::create_symlink("/proc/self", proc / "self");
    DaemonConfig c = config();
    c.proc_root = proc.string();
    // Leases of the default quantum: windows on them too.
    c.scheduler.ready_max_lease_ns = 50 * kMs;
    return c;
  }
  // Two CPUs that spent `busy` and `idle` ticks in all.
  void write_stat(std::uint64_t busy, std::uint64_t idle) {
    std::ofstream out(root_ / "proc" / "stat", std::ios::trunc);
    out << "cpu  " << busy << " 0 0 " << idle << " 0 0 0 0 0 0\n"
        << "cpu0 " << busy / 2 << " 0 0 " << idle / 2 << " 0 0 0 0 0 0\n"
        << "cpu1 " << busy / 2 << " 0 0 " << idle / 2 << " 0 0 0 0 0 0\n"
        << "intr 0\n";
  }
  // Two allocations, idle while the daemon reads the CPUs' counters twice
  // (the host idles, `spare`, or keeps both CPUs busy for 100 ms between);
  // then both work.
  void start(Daemon& daemon, bool spare) {
    for (auto* x : {&*a_, &*b_}) join(*x, false);
    write_stat(1000, 1000);
    tick(daemon, 0);
    write_stat(spare ? 1020 : 1200, spare ? 1180 : 1000);
    tick(daemon, 100 * kMs);  // the next housekeeping pass reads it
    working_ = true;
  }
  // One tick `step` later; returns which allocation holds the lease after
  // it (nullptr: none). Before it, both tenants say what a busy one says:
  // the holder launches (its queue 0.5 ms long), the other waits at its
  // gate, its queue drained.
  Alloc* tick(Daemon& daemon, std::uint64_t step = kMs / 4) {
    now_ += step;
    ++ticks_;
    for (auto* x : {&*a_, &*b_}) {
      auto& gu = x->usage.mutable_region().gpus[0];
      if (!working_) continue;
      if (x == holder_) {
        // Its threads reach their gates now and then (a flickering word).
        gu.demand.store(flicker_ && ticks_ % 3 == 0 ? 1 : 0);
        gu.last_submit_ns.store(now_);
        gu.expected_drain_ns.store(now_ + kMs / 2);
      } else {
        gu.demand.store(1);
        gu.drained_ns.store(now_);
      }
    }
    daemon.tick(now_);
    holder_ = nullptr;
    for (auto* x : {&*a_, &*b_})
      if (x->limits.region().gpus[0].lease_holder.load() == 1) holder_ = x;
    return holder_;
  }
  void SetUp() override {
    DaemonTick::SetUp();
    a_.emplace(make_alloc("a", 50, shm::ComputeMode::kBurst));
    b_.emplace(make_alloc("b", 50, shm::ComputeMode::kBurst));
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    DaemonTick::TearDown();
  }
  std::optional<Alloc> a_, b_;
  std::uint64_t now_ = shm::monotonic_ns();
  Alloc* holder_ = nullptr;
  bool working_ = false;  // both tenants work (start)
  bool flicker_ = false;  // the holder's threads come to their gates now and then
  unsigned ticks_ = 0;
};

TEST_F(ReadyWindows, TheNextHolderIsNamedAndWokenOnceBeforeItsGrant) {
  Daemon daemon(windows_config());
  start(daemon, true);
  flicker_ = true;
  Alloc* holder = tick(daemon);
  ASSERT_NE(holder, nullptr);
  int ticks = 0;
  for (int handoff = 1; handoff <= 4; ++handoff) {
    Alloc* next = holder == &*a_ ? &*b_ : &*a_;
    const auto& l = next->limits.region();
    std::uint64_t named_at = 0, until = 0;
    std::uint32_t wakes = 0, seen = l.gpus[0].lease_futex.load();
    Alloc* after = holder;
    while (ticks++ < 1000) {
      after = tick(daemon);
      if (after == next) break;  // the grant's own wake is not counted
      ASSERT_TRUE(after == holder || after == nullptr) << "only the two take turns";
      EXPECT_EQ(holder->limits.region().ready_gpus.load(), 0u) << "the holder is not named";
      if (l.ready_gpus.load() == 1u && named_at == 0) {
        named_at = now_;
        until = l.ready_until_ns.load();
      }
      // Named, it stays named until its grant, whatever the words do.
      if (named_at != 0) {
        EXPECT_EQ(l.ready_gpus.load(), 1u) << "hand-off " << handoff;
      }
      const std::uint32_t f = l.gpus[0].lease_futex.load();
      wakes += f - seen;
      seen = f;
    }
    ASSERT_EQ(after, next) << "handed on to the other tenant, hand-off " << handoff;
    ASSERT_NE(named_at, 0u) << "named before hand-off " << handoff;
    // Told most of ready_ahead before, and its window reaches the grant.
    EXPECT_GE(now_ - named_at, kMs) << handoff;
    EXPECT_GE(until, now_) << handoff;
    EXPECT_LE(until, now_ + 3 * kMs) << handoff;
    EXPECT_EQ(wakes, 1u) << "one wake per window, hand-off " << handoff;
    EXPECT_EQ(l.ready_gpus.load(), 0u) << "granted, it is named no more";
    holder = after;
  }
}

TEST_F(ReadyWindows, NobodyIsNamedWithoutASpareCpu) {
  Daemon daemon(windows_config());
  start(daemon, false);
  Alloc* first = tick(daemon);
  ASSERT_NE(first, nullptr);
  bool handed_on = false;
  for (int step = 0; step < 200; ++step) {
    handed_on |= tick(daemon) != first;
    for (auto* x : {&*a_, &*b_}) ASSERT_EQ(x->limits.region().ready_gpus.load(), 0u) << step;
  }
  EXPECT_TRUE(handed_on);
}

TEST_F(ReadyWindows, AnEarlierDaemonsWindowIsClearedOnDiscovery) {
  a_->limits.mutable_region().ready_until_ns.store(UINT64_MAX);
  a_->limits.mutable_region().ready_gpus.store(1);
  Daemon daemon(windows_config());
  for (auto* x : {&*a_, &*b_}) join(*x, false);  // nobody waits: nobody to name
  write_stat(1000, 1000);
  tick(daemon, 0);
  EXPECT_EQ(a_->limits.region().ready_gpus.load(), 0u);
  EXPECT_EQ(a_->limits.region().ready_until_ns.load(), 0u);
}

}  // namespace
}  // namespace cushare::sched
