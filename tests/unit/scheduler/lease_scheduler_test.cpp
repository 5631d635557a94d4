// Deterministic tests of the lease policy: a small simulated GPU drives the
// scheduler with an injected clock. The simulated GPU runs one tenant's work
// at a time in submission order, like the real one between contexts: a
// tenant submits continuously while it holds the lease, and its queued work
// takes `overrun` to drain after it stops; the next holder's work queues
// behind it. Ground truth is the time each tenant's work occupied the GPU.
#include "scheduler/lease_scheduler.hpp"
#include "shm/daemon_timing.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

namespace cushare::sched {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kUs = 1'000;
constexpr std::uint64_t kT0 = 1'000'000 * kMs;  // arbitrary monotonic start

struct SimTenant {
  bool busy = true;              // wants the GPU all the time
  std::uint64_t overrun_ns = 0;  // queued work running past the lease end
  bool stalled = false;          // holds in-flight work that never finishes
  std::uint64_t wake_ns = 0;     // its waiting thread starts submitting this long after a grant
  bool publishes_resume = true;  // its shim stamps resumed_ns
  double duty = 1.0;             // of its lease time, the part its work is on the GPU; the
                                 // rest its gate reports as idle gaps (idle_ns)
  bool reports_idle = true;      // false: the idle part goes unreported (a starved poller)
  // Like the real gate: submits only while its queue (overrun_ns of work)
  // would end inside the lease, so it drains by an expiry on time and
  // overruns only a lease cut short.
  bool queue_in_lease = false;
  // Like the real gate with kernels of this length (queue_in_lease,
  // overrun_ns = kernel_ns): a kernel starts every kernel_ns from its first
  // launch while the start is before the expiry, and the GPU runs the last
  // one to its end, past the expiry by anything up to a kernel.
  std::uint64_t kernel_ns = 0;
  bool publishes_per_launch = true;  // its gate publishes kernel_ns as per_launch_ns
  // Two processes: under a cut lease only the one whose work drains this
  // fast may start (the gate's kCutLeaseBit rule), and the per-launch figure
  // it publishes is this (0: one process, as above).
  std::uint64_t cut_overrun_ns = 0;
  // Its gate's per-launch figure where it is not kernel_ns (one inflated
  // sample): published, and under a cut lease the gate starts nothing the
  // figure says would end more than kCutLeaseOverrunNs past the expiry
  // (cut_lease_allows). 0: none.
  std::uint64_t gate_figure_ns = 0;
  // Its threads lose the CPU for stall_ns of every stall_period_ns (a
  // hypervisor's steal, CPU-bound neighbours): meanwhile it submits nothing.
  std::uint64_t stall_period_ns = 0;
  std::uint64_t stall_ns = 0;
  std::uint64_t granted_at = 0;
  std::uint64_t queued_overrun_ns = 0;  // the overrun of its work submitted last
  TenantSignals signals;
  std::uint64_t gpu_ns = 0;  // ground truth
};

class Sim {
 public:
  explicit Sim(SchedulerConfig cfg = {}) : sched(cfg) {}

  void add(TenantId id, TenantPolicy policy, SimTenant t = {}) {
    tenants[id] = t;
    sched.set_tenant(id, policy, now);
  }

  // Advances the simulation by `duration`, stepping the scheduler every `dt`.
  void run(std::uint64_t duration, std::uint64_t dt = 100 * kUs) {
    const std::uint64_t end = now + duration;
    while (now < end) {
      for (auto& [id, t] : tenants) {
        const bool holds = sched.holder() == id && now < lease_expiry;
        TenantSignals& s = t.signals;
        const std::uint64_t submit = kernel_start(t);
        const std::uint64_t overrun = overrun_of(t);
        const bool queue_fits =
            !t.queue_in_lease || (t.kernel_ns ? submit : now + overrun) < lease_expiry;
        if (holds && t.busy && now >= t.granted_at + t.wake_ns && queue_fits && !off_cpu(t) &&
            !kept_out(t)) {
          s.waiting = 0;
          s.last_submit_ns = submit;
          s.expected_drain_ns = submit + overrun;
          t.queued_overrun_ns = overrun;
          if (t.publishes_per_launch) s.per_launch_ns = t.kernel_ns;
          if (t.gate_figure_ns) s.per_launch_ns = t.gate_figure_ns;
          // Its two processes publish their figures in turn; in a cut lease
          // only the short one runs.
          if (t.cut_overrun_ns)
            s.per_launch_ns =
                lease_cut || (now / (100 * kUs)) % 2 ? t.cut_overrun_ns : t.overrun_ns;
          if (t.publishes_resume && s.resumed_ns < t.granted_at)
            s.resumed_ns = t.granted_at + t.wake_ns;  // when the simulated GPU starts it
          if (t.reports_idle)
            s.idle_ns += static_cast<std::uint64_t>(static_cast<double>(dt) * (1.0 - t.duty));
        } else {
          s.waiting = t.busy ? 1 : 0;
        }
        // The shim publishes the time it saw everything submitted complete.
        if (!t.stalled && s.last_submit_ns > s.drained_ns &&
            now >= s.last_submit_ns + t.queued_overrun_ns && !(holds && t.busy)) {
          s.drained_ns = s.last_submit_ns + t.queued_overrun_ns;
        }
        sched.set_signals(id, s);
      }
      const LeaseDecision d = sched.step(now);
      if (d.changed) {
        lease_expiry = d.expiry_ns;
        lease_cut = d.cut;
        if (d.holder && d.revoked) handovers++;
      }
      if (d.holder != last_holder_seen) {
        grants_seen++;
        last_holder_seen = d.holder;
        if (d.holder) {
          tenants[*d.holder].granted_at = now;
          // Told before, by a window still open: how long before.
          const bool told = ready_id == d.holder && ready_until >= now;
          told_ahead[*d.holder].push_back(told ? static_cast<std::int64_t>(now - ready_since) : -1);
        }
      }
      if (!d.ready) {
        ready_id.reset();
      } else {
        if (ready_id != d.ready || ready_until < now) ready_since = now;
        ready_id = d.ready;
        ready_until = d.ready_until_ns;
      }
      // Ground truth: the GPU runs a drain first, then the holder.
      if (draining && now < drain_until) {
        tenants[*draining].gpu_ns += dt;
      } else {
        draining.reset();
        const SimTenant* h = d.holder ? &tenants[*d.holder] : nullptr;
        if (h && now < lease_expiry && h->busy && now >= h->granted_at + h->wake_ns &&
            !off_cpu(*h) && !kept_out(*h)) {
          tenants[*d.holder].gpu_ns +=
              static_cast<std::uint64_t>(static_cast<double>(dt) * h->duty);
          current_runner = d.holder;
        } else if (current_runner) {
          current_runner.reset();
        }
      }
      if (d.revoked && tenants[*d.revoked].queued_overrun_ns > 0) {
        const SimTenant& r = tenants[*d.revoked];
        draining = d.revoked;
        drain_until = r.queue_in_lease
                          ? std::max(now, r.signals.last_submit_ns + r.queued_overrun_ns)
                          : now + r.queued_overrun_ns;
      }
      now += dt;
    }
  }

  std::uint64_t overrun_of(const SimTenant& t) const {
    return t.cut_overrun_ns != 0 && lease_cut ? t.cut_overrun_ns : t.overrun_ns;
  }

  // When the kernel running now started (kernel_ns), else now.
  std::uint64_t kernel_start(const SimTenant& t) const {
    if (t.kernel_ns == 0) return now;
    const std::uint64_t first = t.granted_at + t.wake_ns;
    return now < first ? now : now - (now - first) % t.kernel_ns;
  }

  // Its gate keeps its next launch out of the cut lease it holds.
  bool kept_out(const SimTenant& t) const {
    return lease_cut && t.gate_figure_ns != 0 &&
           now + t.gate_figure_ns > lease_expiry + shm::kCutLeaseOverrunNs;
  }

  bool off_cpu(const SimTenant& t) const {
    return t.stall_period_ns != 0 && (now - kT0) % t.stall_period_ns < t.stall_ns;
  }

  double share(TenantId id, std::uint64_t since_gpu_ns, std::uint64_t window) const {
    return 100.0 * static_cast<double>(tenants.at(id).gpu_ns - since_gpu_ns) /
           static_cast<double>(window);
  }

  LeaseScheduler sched;
  std::map<TenantId, SimTenant> tenants;
  std::uint64_t now = kT0;
  std::uint64_t lease_expiry = 0;
  bool lease_cut = false;  // LeaseDecision::cut of the lease published last
  std::optional<TenantId> last_holder_seen;
  std::optional<TenantId> current_runner;
  std::optional<TenantId> draining;
  std::uint64_t drain_until = 0;
  int handovers = 0;
  int grants_seen = 0;
  // The scheduler's word that a grant is near (LeaseDecision::ready): the
  // tenant named last, until when, since when; and per grant of each
  // tenant, how long before it the tenant was named (-1: not named).
  std::optional<TenantId> ready_id;
  std::uint64_t ready_until = 0, ready_since = 0;
  std::map<TenantId, std::vector<std::int64_t>> told_ahead;
};

TenantPolicy burst(std::uint32_t w) {
  return {.weight = w, .limit_pct = 100, .mode = Mode::kBurst};
}
TenantPolicy capped(std::uint32_t pct) {
  return {.weight = pct, .limit_pct = pct, .mode = Mode::kCapped};
}

// Tenant 1 alone, waiting at its gate: granted at `now`. Returns its signals.
TenantSignals grant_lone(LeaseScheduler& sched, const TenantPolicy& policy, std::uint64_t now) {
  sched.set_tenant(1, policy, now);
  TenantSignals sig{.waiting = 1};
  sched.set_signals(1, sig);
  sched.step(now);
  return sig;
}

// Tenant 2 works until it has had 4 ms of GPU time, then pauses 2 ms of host
// work, 400 times; returns the shares of tenants 1 and 2 after the first 40.
std::pair<double, double> host_gap_steps(Sim& sim, std::uint64_t host_gap_ns = 2 * kMs) {
  std::map<TenantId, std::uint64_t> before;
  std::uint64_t window = 0;
  for (int step = 0; step < 400; ++step) {
    if (step == 40) {
      for (auto& [id, t] : sim.tenants) before[id] = t.gpu_ns;
      window = 0;
    }
    const std::uint64_t start = sim.tenants[2].gpu_ns;
    sim.tenants[2].busy = true;
    const std::uint64_t t0 = sim.now;
    while (sim.tenants[2].gpu_ns < start + 4 * kMs && sim.now < t0 + 50 * kMs) sim.run(100 * kUs);
    sim.tenants[2].busy = false;
    sim.run(host_gap_ns);
    window += sim.now - t0;
  }
  return {sim.share(1, before[1], window), sim.share(2, before[2], window)};
}

// Measures shares over `window` after a warm-up.
std::map<TenantId, double> measure(Sim& sim, std::uint64_t warmup, std::uint64_t window) {
  sim.run(warmup);
  std::map<TenantId, std::uint64_t> before;
  for (auto& [id, t] : sim.tenants) before[id] = t.gpu_ns;
  sim.run(window);
  std::map<TenantId, double> out;
  for (auto& [id, t] : sim.tenants) out[id] = sim.share(id, before[id], window);
  return out;
}

// Tenants 1 and 2, equal weights, split the GPU evenly after `warmup`.
void expect_even_split(Sim& sim, std::uint64_t warmup, std::uint64_t window, double tolerance) {
  auto s = measure(sim, warmup, window);
  EXPECT_NEAR(s[1], 50.0, tolerance);
  EXPECT_NEAR(s[2], 50.0, tolerance);
}

TEST(LeaseScheduler, LoneBurstTenantKeepsOneLeaseExtendedInPlace) {
  Sim sim;
  sim.add(1, burst(30));
  auto s = measure(sim, 50 * kMs, 1000 * kMs);
  EXPECT_GE(s[1], 99.5);
  const TenantStats st = sim.sched.stats(1);
  EXPECT_EQ(st.grants, 1u) << "a lone tenant must never lose and regain its lease";
  EXPECT_EQ(st.handoffs, 0u);
  EXPECT_EQ(st.target_ppm, 1'000'000u);
}

TEST(LeaseScheduler, ALoneTenantsLeaseOutlastsADaemonThatStepsLate) {
  // The daemon steps only every 25 ms (a loaded host, normal priority): a
  // lease of one quantum extended 5 ms before its end ran out between two
  // steps, and the tenant's gate held its work until the next one.
  Sim late;
  late.add(1, burst(30));
  late.run(50 * kMs, 25 * kMs);
  const std::uint64_t before = late.tenants[1].gpu_ns;
  late.run(1000 * kMs, 25 * kMs);
  EXPECT_GE(late.share(1, before, 1000 * kMs), 99.5);
  EXPECT_EQ(late.sched.stats(1).grants, 1u);
  EXPECT_LE(late.lease_expiry,
            late.now + late.sched.config().lone_lease_quanta * late.sched.config().quantum_ns)
      << "the lease reaches at most lone_lease_quanta ahead";
}

TEST(LeaseScheduler, ALoneLeaseIsCutBackWhenAnotherTenantWantsTheGpu) {
  Sim sim;
  sim.add(1, burst(1));
  sim.run(200 * kMs);
  const auto& cfg = sim.sched.config();
  EXPECT_GT(sim.lease_expiry, sim.now + cfg.quantum_ns) << "alone: a lease beyond one quantum";
  sim.add(2, burst(1));
  const std::uint64_t arrived = sim.now;
  while (sim.sched.holder() != 2u && sim.now < arrived + 50 * kMs) sim.run(100 * kUs);
  EXPECT_EQ(sim.sched.holder(), 2u);
  EXPECT_LE(sim.now - arrived, cfg.extend_margin_ns + kMs)
      << "the newcomer waits no longer than the extension margin";
  expect_even_split(sim, 30 * kMs, 400 * kMs, 4.0);
}

TEST(LeaseScheduler, ALeaseIsNotLoneWhileAnotherTenantIsBetweenTwoSteps) {
  // Tenant 2 stops for 2 ms of host work after every 4 ms of GPU work: the
  // holder's lease must keep ending where it is due back, not run 40 ms.
  Sim sim;
  sim.add(1, burst(1));
  sim.add(2, burst(1));
  sim.run(100 * kMs);
  sim.tenants[2].busy = false;
  sim.run(1 * kMs);
  if (sim.sched.holder() == 1u) {
    EXPECT_LE(sim.lease_expiry, sim.now + sim.sched.config().quantum_ns);
  }
  sim.run(20 * kMs + 2 * sim.sched.config().quantum_ns);
  EXPECT_EQ(sim.sched.holder(), 1u);
  EXPECT_GT(sim.lease_expiry, sim.now + sim.sched.config().quantum_ns)
      << "away longer than a short gap: alone";
}

TEST(LeaseScheduler, LoneCappedTenantGetsExactlyItsLimit) {
  Sim sim;
  sim.add(1, capped(30));
  auto s = measure(sim, 100 * kMs, 2000 * kMs);
  EXPECT_NEAR(s[1], 30.0, 0.5);
  EXPECT_EQ(sim.sched.stats(1).target_ppm, 300'000u);
  EXPECT_NEAR(sim.sched.stats(1).achieved_ppm, 300'000, 10'000);
}

TEST(LeaseScheduler, CappedTenantNeverExceedsLimitInAnyWindow) {
  Sim sim;
  sim.add(1, capped(20));
  // Sample 100 ms windows: at most limit x (window + bank) plus one quantum.
  const auto& cfg = sim.sched.config();
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t before = sim.tenants[1].gpu_ns;
    sim.run(100 * kMs);
    EXPECT_LE(sim.tenants[1].gpu_ns - before, (100 * kMs + cfg.cap_bank_ns) / 5 + cfg.quantum_ns)
        << "window " << i;
  }
}

TEST(LeaseScheduler, ATenantThatComesBackIsANewIncarnationARefundIsNot) {
  LeaseScheduler sched;
  const TenantSignals sig = grant_lone(sched, burst(1), kT0);
  sched.step(kT0 + 5 * kMs);
  const TenantStats first = sched.stats(1);
  ASSERT_GT(first.attributed_ns, 0u);
  // Its gate reports an idle gap: attributed_ns goes down, same incarnation.
  TenantSignals idle = sig;
  idle.idle_ns += 2 * kMs;
  sched.set_signals(1, idle);
  sched.step(kT0 + 5 * kMs + kUs);
  EXPECT_LT(sched.stats(1).attributed_ns, first.attributed_ns);
  EXPECT_EQ(sched.stats(1).incarnation, first.incarnation);
  sched.remove_tenant(1, kT0 + 6 * kMs);
  sched.set_tenant(1, burst(1), kT0 + 7 * kMs);
  EXPECT_NE(sched.stats(1).incarnation, first.incarnation);
  EXPECT_EQ(sched.stats(1).attributed_ns, 0u);
}

TEST(LeaseScheduler, BurstTenantsShareByWeight) {
  Sim sim;
  sim.add(1, burst(1));
  sim.add(2, burst(3));
  auto s = measure(sim, 100 * kMs, 2000 * kMs);
  EXPECT_NEAR(s[1], 25.0, 1.0);
  EXPECT_NEAR(s[2], 75.0, 1.0);
  EXPECT_EQ(sim.sched.stats(1).target_ppm, 250'000u);
}

TEST(LeaseScheduler, WeightsHoldWhileTheBusierTenantsThreadsStall) {
  // The weight-90 tenant's threads lose the CPU 6 ms in every 30 (a fifth
  // of the CPU stolen), so it starves in many of its leases and can use 80 %
  // at most. The weight-10 one's queue runs `kernel` past each of its
  // leases (one kernel launched at the end runs to its end). Passed over at
  // every stall whatever the lead, the weight-10 tenant ran at 20 % with
  // 5 ms kernels (fine: they fit the stalls) and at 70 % with 20 ms ones,
  // the busier tenant at 29 %.
  struct Case {
    std::uint64_t kernel;
    double busier_least;  // its 80 % where the other's kernels fit its stalls;
                          // else its 80 % of the time the other is not running
  };
  for (const Case c : {Case{5 * kMs, 80.0 - 2.0}, Case{20 * kMs, 90.0 * 0.8 - 2.0}}) {
    Sim sim;
    sim.add(1, burst(10), {.overrun_ns = c.kernel});
    sim.add(2, burst(90), {.stall_period_ns = 30 * kMs, .stall_ns = 6 * kMs});
    auto s = measure(sim, 200 * kMs, 3000 * kMs);
    EXPECT_LE(s[1], 10.0 + 2.0) << c.kernel / kMs << " ms kernels";
    EXPECT_GE(s[2], c.busier_least) << c.kernel / kMs << " ms kernels";
  }
}

TEST(LeaseScheduler, TwoCappedTenantsGetTheirCapsAndTheGpuIdlesOtherwise) {
  Sim sim;
  sim.add(1, capped(30));
  sim.add(2, capped(50));
  auto s = measure(sim, 100 * kMs, 2000 * kMs);
  EXPECT_NEAR(s[1], 30.0, 1.0);
  EXPECT_NEAR(s[2], 50.0, 1.0);
}

TEST(LeaseScheduler, ASlowWakeUpAfterTheGrantIsNotChargedAsUse) {
  // Each grant wakes a thread that takes 1 ms to start submitting (a loaded
  // host): the GPU idles meanwhile. Charged as use, that would cost the
  // capped tenants a tenth of their caps.
  Sim sim;
  sim.add(1, capped(30), {.wake_ns = 1 * kMs});
  sim.add(2, capped(50), {.wake_ns = 1 * kMs});
  auto s = measure(sim, 100 * kMs, 2000 * kMs);
  EXPECT_NEAR(s[1], 30.0, 1.0);
  EXPECT_NEAR(s[2], 50.0, 1.0);
  // A shim that does not say when it went on is charged from the grant.
  Sim silent;
  silent.add(1, capped(50), {.wake_ns = 1 * kMs, .publishes_resume = false});
  EXPECT_LT(measure(silent, 100 * kMs, 2000 * kMs)[1], 47.0);
}

// Four burst tenants whose woken threads take `wake` to start submitting:
// the device's busy percentage over 2 s, and the lease length reached.
std::pair<double, std::uint64_t> four_equal_busy(std::uint64_t wake, SchedulerConfig cfg = {}) {
  Sim sim(cfg);
  for (TenantId id = 1; id <= 4; ++id) sim.add(id, burst(1), {.wake_ns = wake});
  auto s = measure(sim, 300 * kMs, 2000 * kMs);
  double busy = 0;
  for (const auto& [id, share] : s) busy += share;
  return {busy, sim.sched.lease_length_ns()};
}

// Four equal tenants whose hand-offs each cost `wake`: with the baseline
// config (leases of one quantum) and with the default, which lengthens leases
// to about lease_per_handoff hand-offs.
struct HandOffCase {
  const char* what;
  std::uint64_t wake;
  SchedulerConfig baseline;
  double baseline_busy_below, busy_at_least;
  std::uint64_t lease_at_least;
};

TEST(LeaseScheduler, LeasesGrowWhereHandOffsAreSlow) {
  SchedulerConfig fixed;
  fixed.max_lease_quanta = 1;
  SchedulerConfig budget_40;
  budget_40.lease_per_handoff = 40;
  const std::uint64_t q = SchedulerConfig{}.quantum_ns;
  const HandOffCase cases[] = {
      // A loaded host, a daemon at normal priority: with leases of one
      // quantum the device idles a tenth of the time.
      {"1 ms wake-ups", 1 * kMs, fixed, 92.0, 97.0, 2 * q + 1},
      // The development VM's hand-off (the drain's publication, the daemon's
      // and the next holder's wake-ups): at 40 hand-offs per lease leases
      // stayed one quantum there and the device lost 2 % at hand-offs; at
      // 100 they cost about 1 %.
      {"200 us hand-offs", 200 * kUs, budget_40, 98.5, 98.8, 2 * q - q / 10},
  };
  for (const HandOffCase& c : cases) {
    const auto [baseline_busy, baseline_lease] = four_equal_busy(c.wake, c.baseline);
    const auto [busy, lease] = four_equal_busy(c.wake);
    EXPECT_EQ(baseline_lease, q) << c.what;
    EXPECT_LT(baseline_busy, c.baseline_busy_below) << c.what;
    EXPECT_GE(busy, c.busy_at_least) << c.what << ": leases of " << lease / kMs << " ms";
    EXPECT_GE(lease, c.lease_at_least) << c.what;
    EXPECT_LE(lease, q * SchedulerConfig{}.max_lease_quanta) << c.what;
  }
}

TEST(LeaseScheduler, LeasesStayOneQuantumWhereHandOffsAreQuick) {
  const auto [busy, lease] = four_equal_busy(100 * kUs);
  EXPECT_EQ(lease, SchedulerConfig{}.quantum_ns);
  EXPECT_GE(busy, 98.0);
}

TEST(LeaseScheduler, CapsHoldWithLeasesGrownForSlowHandOffs) {
  Sim sim;
  sim.add(1, capped(30), {.wake_ns = 2 * kMs});
  sim.add(2, capped(50), {.wake_ns = 2 * kMs});
  sim.add(3, burst(10), {.wake_ns = 2 * kMs});
  auto s = measure(sim, 300 * kMs, 3000 * kMs);
  EXPECT_GT(sim.sched.lease_length_ns(), sim.sched.config().quantum_ns);
  EXPECT_NEAR(s[1], 30.0, 1.0);
  EXPECT_NEAR(s[2], 50.0, 1.0);
}

TEST(LeaseScheduler, ALeaseIsChargedFromItsFirstLaunchWithinTheGrace) {
  SchedulerConfig cfg;
  const auto charged_after = [&](std::uint64_t resumed_after, std::uint64_t at) {
    LeaseScheduler s(cfg);
    s.set_tenant(1, burst(1), kT0);
    s.set_signals(1, {.waiting = 1});
    EXPECT_EQ(s.step(kT0).holder, 1u);
    s.step(kT0 + resumed_after / 2);
    if (resumed_after != 0) {
      s.set_signals(1, {.last_submit_ns = kT0 + resumed_after,
                        .drained_ns = kT0,
                        .expected_drain_ns = kT0 + at,
                        .busy_processes = 1,
                        .resumed_ns = kT0 + resumed_after});
    }
    s.step(kT0 + at);
    return s.stats(1).attributed_ns;
  };
  EXPECT_EQ(charged_after(1 * kMs, 5 * kMs), 4 * kMs);
  EXPECT_EQ(charged_after(cfg.resume_grace_ns, 5 * kMs), 5 * kMs - cfg.resume_grace_ns);
  // Past the grace, or never: from the grant.
  EXPECT_EQ(charged_after(cfg.resume_grace_ns + kUs, 5 * kMs), 5 * kMs);
  EXPECT_EQ(charged_after(0, 5 * kMs), 5 * kMs);
  // Within the grace and nothing seen yet: not charged yet.
  EXPECT_EQ(charged_after(0, cfg.resume_grace_ns - kUs), 0u);
}

TEST(LeaseScheduler, FourEqualBurstTenantsSplitEvenly) {
  Sim sim;
  for (TenantId id = 1; id <= 4; ++id) sim.add(id, burst(25));
  auto s = measure(sim, 100 * kMs, 2000 * kMs);
  double total = 0;
  for (TenantId id = 1; id <= 4; ++id) {
    EXPECT_NEAR(s[id], 25.0, 1.0) << id;
    total += s[id];
  }
  EXPECT_GE(total, 99.0);
}

TEST(LeaseScheduler, BurstTenantTakesWhatACappedOneLeaves) {
  Sim sim;
  sim.add(1, capped(30));
  sim.add(2, burst(30));
  auto s = measure(sim, 100 * kMs, 2000 * kMs);
  EXPECT_NEAR(s[1], 30.0, 1.0);
  EXPECT_NEAR(s[2], 70.0, 1.0);
}

TEST(LeaseScheduler, OverrunIsChargedToTheHolder) {
  // Tenant 1's queued work runs 4 ms past every lease end; without charging
  // it, tenant 1 would get ~(10+4)/(10+10) of the GPU.
  Sim sim;
  sim.add(1, burst(1), {.overrun_ns = 4 * kMs});
  sim.add(2, burst(1));
  auto s = measure(sim, 100 * kMs, 2000 * kMs);
  EXPECT_NEAR(s[1], 50.0, 1.5);
  EXPECT_NEAR(s[2], 50.0, 1.5);
  EXPECT_NEAR(sim.sched.stats(1).attributed_ns, sim.tenants[1].gpu_ns, 5 * kMs);
}

TEST(LeaseScheduler, NextGrantWaitsForTheFormerHoldersQueuedWork) {
  SchedulerConfig cfg;
  cfg.lone_lease_quanta = 1;  // a lease of one quantum, though tenant 2 waits only later
  LeaseScheduler s(cfg);
  s.set_tenant(1, burst(1), kT0);
  s.set_tenant(2, burst(1), kT0);
  s.set_signals(1, {.waiting = 1});
  LeaseDecision d = s.step(kT0);
  ASSERT_EQ(d.holder, 1u);
  const std::uint64_t end = d.expiry_ns;
  // Tenant 1 submitted a long kernel just before its lease ended: it should
  // finish 8 ms after the end.
  s.set_signals(1, {.waiting = 1,
                    .last_submit_ns = end - kUs,
                    .drained_ns = kT0,
                    .expected_drain_ns = end + 8 * kMs});
  s.set_signals(2, {.waiting = 1});
  d = s.step(end);
  EXPECT_FALSE(d.holder.has_value()) << "granting now would share the GPU with the overrun";
  EXPECT_EQ(d.next_step_ns, end + 8 * kMs - cfg.handoff_lead_ns);
  // The estimate has passed but the drain was not seen: keep waiting...
  d = s.step(end + 8 * kMs - cfg.handoff_lead_ns);
  EXPECT_FALSE(d.holder.has_value());
  // ...until it is.
  s.set_signals(1, {.waiting = 1,
                    .last_submit_ns = end - kUs,
                    .drained_ns = end + 9 * kMs,
                    .expected_drain_ns = end + 8 * kMs});
  d = s.step(end + 9 * kMs + kUs);
  EXPECT_EQ(d.holder, 2u);
  EXPECT_EQ(s.stats(1).attributed_ns, cfg.quantum_ns + 9 * kMs);
  // If the work drains earlier than expected, the grant follows at once.
  LeaseScheduler s2(cfg);
  s2.set_tenant(1, burst(1), kT0);
  s2.set_tenant(2, burst(1), kT0);
  s2.set_signals(1, {.waiting = 1});
  const std::uint64_t end2 = s2.step(kT0).expiry_ns;
  s2.set_signals(1, {.waiting = 0,
                     .last_submit_ns = end2 - kUs,
                     .drained_ns = kT0,
                     .expected_drain_ns = end2 + 8 * kMs});
  s2.set_signals(2, {.waiting = 1});
  EXPECT_FALSE(s2.step(end2).holder.has_value());
  s2.set_signals(1, {.waiting = 0,
                     .last_submit_ns = end2 - kUs,
                     .drained_ns = end2 + 2 * kMs,
                     .expected_drain_ns = end2 + 8 * kMs});
  EXPECT_EQ(s2.step(end2 + 2 * kMs).holder, 2u);
  // The overrun is charged to tenant 1.
  EXPECT_EQ(s2.stats(1).attributed_ns, cfg.quantum_ns + 2 * kMs);
}

TEST(LeaseScheduler, ABusyProcessKeepsTheAllocationUndrained) {
  // Two processes in tenant 1's allocation: the one with short kernels saw
  // its own queue empty and published a drain mark past the lease end, the
  // other still runs a long kernel. The mark does not speak for the
  // allocation while a process counts itself busy.
  SchedulerConfig cfg;
  cfg.lone_lease_quanta = 1;  // a lease of one quantum, though tenant 2 waits only later
  LeaseScheduler s(cfg);
  s.set_tenant(1, burst(1), kT0);
  s.set_tenant(2, burst(1), kT0);
  s.set_signals(1, {.waiting = 1});
  const std::uint64_t end = s.step(kT0).expiry_ns;
  s.set_signals(1, {.waiting = 0,
                    .last_submit_ns = end - kUs,
                    .drained_ns = end + kMs,
                    .expected_drain_ns = end + 20 * kMs,
                    .busy_processes = 1});
  s.set_signals(2, {.waiting = 1});
  EXPECT_FALSE(s.step(end + kMs).holder.has_value());
  EXPECT_FALSE(s.step(end + 10 * kMs).holder.has_value());
  // The long kernel ends: that process leaves the busy count and publishes.
  s.set_signals(1, {.waiting = 0,
                    .last_submit_ns = end - kUs,
                    .drained_ns = end + 20 * kMs,
                    .expected_drain_ns = end + 20 * kMs,
                    .busy_processes = 0});
  EXPECT_EQ(s.step(end + 20 * kMs + kUs).holder, 2u);
  EXPECT_EQ(s.stats(1).attributed_ns, cfg.quantum_ns + 20 * kMs);
}

TEST(LeaseScheduler, HolderWithABusyProcessIsNotIdle) {
  SchedulerConfig cfg;
  LeaseScheduler s(cfg);
  s.set_tenant(1, burst(1), kT0);
  s.set_signals(1, {.waiting = 1});
  ASSERT_EQ(s.step(kT0).holder, 1u);
  // Nothing waiting, the drain mark past the last submission, but one
  // process still has work in flight: the lease stays.
  s.set_signals(1, {.waiting = 0,
                    .last_submit_ns = kT0 + kMs,
                    .drained_ns = kT0 + 2 * kMs,
                    .busy_processes = 1});
  EXPECT_EQ(s.step(kT0 + 2 * kMs + cfg.idle_grace_ns + kUs).holder, 1u);
  s.set_signals(1, {.waiting = 0,
                    .last_submit_ns = kT0 + kMs,
                    .drained_ns = kT0 + 2 * kMs,
                    .busy_processes = 0});
  EXPECT_FALSE(s.step(kT0 + 2 * kMs + cfg.idle_grace_ns + 2 * kUs).holder.has_value());
}

TEST(LeaseScheduler, IdleHolderReleasesEarly) {
  SchedulerConfig cfg;
  Sim sim(cfg);
  sim.add(1, burst(1));
  sim.add(2, burst(1), {.busy = false});
  sim.run(3 * kMs);
  ASSERT_EQ(sim.sched.holder(), 1u);
  sim.tenants[1].busy = false;  // stops submitting; nothing in flight
  sim.tenants[2].busy = true;
  const std::uint64_t t = sim.now;
  sim.run(cfg.idle_grace_ns + kMs);
  EXPECT_EQ(sim.sched.holder(), 2u) << "lease should move before tenant 1's quantum ended";
  EXPECT_LT(sim.now - t, cfg.quantum_ns / 2);
  // With nobody waiting an idle holder gives the lease back too.
  sim.tenants[2].busy = false;
  sim.run(cfg.idle_grace_ns + kMs);
  EXPECT_FALSE(sim.sched.holder().has_value());
}

TEST(LeaseScheduler, DeadHolderLosesTheLeaseAtOnce) {
  Sim sim;
  sim.add(1, burst(1));
  sim.add(2, burst(1));
  sim.run(2 * kMs);
  const TenantId holder = *sim.sched.holder();
  const TenantId other = holder == 1 ? 2 : 1;
  sim.sched.remove_tenant(holder, sim.now);
  sim.tenants.erase(holder);
  const LeaseDecision d = sim.sched.step(sim.now);
  ASSERT_TRUE(d.holder.has_value());
  EXPECT_EQ(*d.holder, other);
  EXPECT_EQ(d.revoked, holder);
  EXPECT_FALSE(sim.sched.has_tenant(holder));
}

TEST(LeaseScheduler, StalledHolderLosesTheLeaseAndItsChargeIsBounded) {
  SchedulerConfig cfg;
  cfg.drain_bound_ns = 30 * kMs;
  Sim sim(cfg);
  sim.add(1, burst(1));
  sim.run(2 * kMs);
  ASSERT_EQ(sim.sched.holder(), 1u);
  // Submits no more, but its last work never completes (hung kernel).
  sim.tenants[1].busy = false;
  sim.tenants[1].stalled = true;
  sim.add(2, burst(1));
  sim.run(cfg.quantum_ns + kMs);
  EXPECT_NE(sim.sched.holder(), 1u) << "a stalled holder is not extended";
  // The hand-off waits for its work at most the drain bound.
  sim.run(cfg.drain_bound_ns);
  EXPECT_EQ(sim.sched.holder(), 2u);
  sim.run(200 * kMs);
  // Tenant 1: its lease plus at most the drain bound.
  EXPECT_LE(sim.sched.stats(1).attributed_ns, cfg.quantum_ns + cfg.drain_bound_ns + kMs);
  EXPECT_GE(sim.sched.stats(2).attributed_ns, 150 * kMs);
}

TEST(LeaseScheduler, NewcomerCannotClaimTimeFromBeforeItArrived) {
  Sim sim;
  sim.add(1, burst(1));
  sim.run(1000 * kMs);
  sim.add(2, burst(1));
  expect_even_split(sim, 30 * kMs, 200 * kMs, 6.0);
}

TEST(LeaseScheduler, ReturningFromIdleDoesNotBankCredit) {
  Sim sim;
  sim.add(1, burst(1));
  sim.add(2, burst(1), {.busy = false});
  sim.run(500 * kMs);
  sim.tenants[2].busy = true;
  expect_even_split(sim, 30 * kMs, 200 * kMs, 6.0);
}

TEST(LeaseScheduler, IdleGapsInsideLeasesAreRefundedSoCapsHoldInBusyTime) {
  // A tenant that synchronises has its work on the GPU only part of its
  // lease; charged lease time, a cap of 30 gave it 30 x duty. Charged busy
  // time, it gets its cap of the GPU.
  for (double duty : {0.9, 0.6}) {
    Sim sim;
    sim.add(1, capped(30), {.duty = duty});
    auto s = measure(sim, 200 * kMs, 2000 * kMs);
    EXPECT_NEAR(s[1], 30.0, 1.0) << "duty " << duty;
    EXPECT_GT(sim.sched.stats(1).refunded_ns, 0u);
  }
}

TEST(LeaseScheduler, ABusyScaleFromGroundTruthMakesUpForIdleTheRefundsMiss) {
  // Idle inside its leases that no gate reported: charged lease time, its
  // cap gives it 30 x duty of the GPU; with the lease time ground truth finds
  // per ns of its GPU time as the busy scale, its cap.
  for (double duty : {0.9, 0.85}) {
    Sim sim;
    sim.add(1, capped(30), {.duty = duty, .reports_idle = false});
    EXPECT_NEAR(measure(sim, 200 * kMs, 2000 * kMs)[1], 30.0 * duty, 1.0) << "duty " << duty;
    sim.sched.set_busy_scale(1, 1.0 / duty);
    EXPECT_NEAR(measure(sim, 200 * kMs, 2000 * kMs)[1], 30.0, 1.0) << "duty " << duty;
  }
}

TEST(LeaseScheduler, RefundsAreTakenBackAtTheScaleTheChargesWereMadeAt) {
  // Idle gaps reported and refunded, and a scale on top: the cap clock moves
  // back by a refund as far as the charge moved it forward, so the tenant
  // gets its cap x scale of lease time's work, no more.
  Sim sim;
  sim.add(1, capped(30), {.duty = 0.6});
  sim.sched.set_busy_scale(1, 1.2);
  EXPECT_NEAR(measure(sim, 200 * kMs, 2000 * kMs)[1], 36.0, 1.0);
  EXPECT_GT(sim.sched.stats(1).refunded_ns, 0u);
}

TEST(LeaseScheduler, TheBusyScaleIsBounded) {
  Sim sim;
  sim.add(1, capped(30), {.duty = 0.25, .reports_idle = false});
  sim.sched.set_busy_scale(1, 4.0);
  EXPECT_NEAR(measure(sim, 200 * kMs, 2000 * kMs)[1], 30.0 * 0.25 * kMaxBusyScale, 1.0);
  sim.sched.set_busy_scale(1, 0.5);  // never below 1: lease time is at least GPU time
  EXPECT_NEAR(measure(sim, 200 * kMs, 2000 * kMs)[1], 30.0 * 0.25, 1.0);
  sim.sched.set_busy_scale(1, std::nan(""));
  EXPECT_NEAR(measure(sim, 200 * kMs, 2000 * kMs)[1], 30.0 * 0.25, 1.0);
}

TEST(LeaseScheduler, BurstTenantsSplitBusyTimeByWeightWhateverTheirDuty) {
  Sim sim;
  sim.add(1, burst(1), {.duty = 0.7});
  sim.add(2, burst(3), {.duty = 0.95});
  auto s = measure(sim, 200 * kMs, 3000 * kMs);
  const double busy = s[1] + s[2];
  EXPECT_NEAR(100.0 * s[1] / busy, 25.0, 2.0);
  EXPECT_NEAR(100.0 * s[2] / busy, 75.0, 2.0);
}

TEST(LeaseScheduler, AForgedIdleCounterRefundsAtMostTheRecentCharge) {
  SchedulerConfig cfg;
  Sim sim(cfg);
  sim.add(1, burst(1));
  sim.run(500 * kMs);
  const std::uint64_t before = sim.sched.stats(1).attributed_ns;
  sim.tenants[1].signals.idle_ns += 1'000'000 * kMs;  // a tenant writes its own region
  sim.run(kMs);
  const TenantStats after = sim.sched.stats(1);
  EXPECT_LE(after.refunded_ns, cfg.refund_horizon_ns);
  EXPECT_GE(after.attributed_ns + cfg.refund_horizon_ns, before);
  // A counter that goes backwards is a new baseline, not a refund.
  sim.tenants[1].signals.idle_ns = 0;
  sim.run(kMs);
  EXPECT_EQ(sim.sched.stats(1).refunded_ns, after.refunded_ns);
}

TEST(LeaseScheduler, AnIdleReleaseRefundIsTakenBackWhenALaunchRacedIt) {
  // The holder idles for the grace and its lease is given back, the grace
  // refunded. Had a launch passed the gate just before (its submission
  // published after the step, no new resume stamp), the holder was not idle: its gate reports
  // the gap up to that launch, so the release's refund is charged back.
  for (bool raced : {false, true}) {
    SchedulerConfig cfg;
    LeaseScheduler sched(cfg);
    std::uint64_t now = kT0;
    TenantSignals sig = grant_lone(sched, burst(1), now);
    ASSERT_EQ(sched.holder(), 1u);
    for (int i = 0; i < 30; ++i) {  // busy for 3 ms
      now += 100 * kUs;
      sig = {.waiting = 0,
             .last_submit_ns = now,
             .drained_ns = now - 50 * kUs,
             .busy_processes = 1,
             .resumed_ns = kT0};
      sched.set_signals(1, sig);
      sched.step(now);
    }
    const std::uint64_t idle_since = now;
    sig.busy_processes = 0;
    sig.drained_ns = idle_since;
    while (sched.holder()) {
      now += 100 * kUs;
      sched.set_signals(1, sig);
      sched.step(now);
    }
    const TenantStats released = sched.stats(1);
    EXPECT_GE(released.refunded_ns, cfg.idle_grace_ns - 200 * kUs);
    // Either way the submission is stamped after the release; a comeback
    // through a new lease also stamps resumed_ns, a raced launch does not.
    sig.last_submit_ns = now + 50 * kUs;
    if (!raced) sig.resumed_ns = now + 20 * kUs;
    now += 100 * kUs;
    sched.set_signals(1, sig);
    sched.step(now);
    if (raced) {
      EXPECT_EQ(sched.stats(1).refunded_ns, 0u);
      EXPECT_EQ(sched.stats(1).attributed_ns, released.attributed_ns + released.refunded_ns);
    } else {
      EXPECT_EQ(sched.stats(1).refunded_ns, released.refunded_ns);
    }
  }
}

TEST(LeaseScheduler, ATenantBackFromAShortGapFindsTheGpuFree) {
  // The same two tenants, the weight-1 one keeping 2 ms of work queued as
  // the gate does. Each time the weight-3 tenant comes back it preempts the
  // holder, whose queue then drains first: 2 ms of every 6 ms step lost,
  // and it got half. The holder's lease ends where the tenant is expected
  // back, so its queue has drained by then.
  Sim sim;
  sim.add(1, burst(1), {.overrun_ns = 2 * kMs, .queue_in_lease = true});
  sim.add(2, burst(3));  // syncs before its host work: nothing queued then
  const auto [s1, s2] = host_gap_steps(sim);
  EXPECT_GT(s2, 64.0);  // its demand, 2/3 (without the cut: 50.0)
  EXPECT_GT(s1 + s2, 95.0);
  // It does not come back: one cut lease runs out, then the holder keeps
  // the GPU on full leases again.
  sim.tenants[2].busy = false;
  const std::uint64_t grants = sim.sched.stats(1).grants;
  auto after = measure(sim, 5 * kMs, 200 * kMs);
  EXPECT_GE(after[1], 98.0);
  EXPECT_LE(sim.sched.stats(1).grants, grants + 2);
}

TEST(LeaseScheduler, ACutLeaseEndsHalfALaunchBeforeTheReturn) {
  // As above, but the holder runs 1 ms kernels and the other's host work
  // takes 2.5 ms: the holder's gate starts a kernel up to the expiry and the
  // GPU runs it to its end. With the lease cut at the return itself, the
  // returning tenant waited for that kernel at every return.
  std::map<bool, std::pair<double, double>> got;
  for (const bool published : {false, true}) {
    Sim sim;
    sim.add(1, burst(1),
            {.overrun_ns = kMs,
             .queue_in_lease = true,
             .kernel_ns = kMs,
             .publishes_per_launch = published});
    sim.add(2, burst(3));  // syncs before its host work: nothing queued then
    got[published] = host_gap_steps(sim, 2500 * kUs);
  }
  // Without the figure: 41.4 / 57.1; with it: 30.8 / 61.5.
  EXPECT_LT(got[false].second, 58.0);
  EXPECT_GT(got[true].second, 61.0);  // its demand, 4 / 6.5
  EXPECT_GT(got[true].first + got[true].second, 90.0);
}

TEST(LeaseScheduler, ACutLeaseWeighsTheFigureTimesTheProcessesWithWorkInFlight) {
  // The weight-1 allocation publishes a per-launch figure of 2.5 ms (not
  // short, not long) with its processes' time slices of each other taken
  // out; a launch takes it times the processes with work in flight. With
  // one, it fits a cut lease in the weight-3 tenant's 4 ms host gap (about
  // 3 ms: it ends within kCutLeaseOverrunNs of the cut). With two, each
  // launch would take 5 ms and its gate would start none there: the cut
  // lease would sit idle and be charged, so it is granted a whole one. A
  // forged count is bounded (shm::kMaxSlots).
  for (const std::uint32_t busy : {1u, 2u, 100'000u}) {
    Sim sim;
    sim.add(1, burst(1),
            {.overrun_ns = 2500 * kUs, .queue_in_lease = true, .kernel_ns = 2500 * kUs});
    sim.add(2, burst(3));          // syncs before its host work: nothing queued then
    host_gap_steps(sim, 4 * kMs);  // learns the weight-3 tenant's gaps
    SimTenant& back = sim.tenants[2];
    const std::uint64_t start = back.gpu_ns;
    back.busy = true;
    while (back.gpu_ns < start + 4 * kMs && sim.now < kT0 + 10'000 * kMs) sim.run(100 * kUs);
    back.busy = false;
    // Only from here: a busy count the simulated GPU does not clear would
    // keep the allocation's drain from being seen.
    sim.tenants[1].signals.busy_processes = busy;
    const std::uint64_t left = sim.now;
    while (sim.sched.holder() != 1u && sim.now < left + 2 * kMs) sim.run(100 * kUs);
    ASSERT_EQ(sim.sched.holder(), 1u) << busy << " busy";
    if (busy == 1) {
      EXPECT_TRUE(sim.lease_cut);
      EXPECT_LT(sim.lease_expiry, left + 4 * kMs);  // before the return
      EXPECT_GE(sim.lease_expiry + shm::kCutLeaseOverrunNs, sim.now + 2500 * kUs);
    } else {
      EXPECT_FALSE(sim.lease_cut) << busy << " busy";
      EXPECT_GT(sim.lease_expiry, left + 4 * kMs) << busy << " busy";
    }
  }
}

TEST(LeaseScheduler, AHolderWhoseGateKeepsItsLaunchesOutOfCutLeasesGetsWholeOnes) {
  // Weights 1:3, the weight-3 tenant with host gaps, the weight-1 one with
  // 1 ms kernels whose gate holds a per-launch figure of 4.4 ms (one inflated
  // sample): in the cut leases of the other's gaps it starts nothing. Cut
  // anyway, it held them idle, was charged for them and never ran again
  // (on fakegpu: 12 % for a water-fill of 35, nothing at all for seconds).
  // Its host work takes 2.6 ms (with the wake-ups, as on fakegpu): cut
  // leases of 1.6 ms. Beside it, the same with an honest figure (1 ms).
  std::map<bool, std::pair<double, double>> got;
  for (const bool inflated : {false, true}) {
    Sim sim;
    sim.add(1, burst(1),
            {.overrun_ns = kMs,
             .queue_in_lease = true,
             .kernel_ns = kMs,
             .gate_figure_ns = inflated ? 4400 * kUs : 0});
    sim.add(2, burst(3));  // syncs before its host work: nothing queued then
    got[inflated] = host_gap_steps(sim, 2600 * kUs);
  }
  const auto [s1, s2] = got[true];
  // 41.4 / 57.1 (its demand 60.6), as with the honest figure; cut as
  // before, 0 for the weight-1 tenant.
  EXPECT_GT(s1, 30.0);
  EXPECT_GT(s1 + s2, 95.0);
  // The figure is the tenant's: forged so, it takes nothing more from the
  // returning tenant than the honest one's cut leases do.
  EXPECT_GT(s2, got[false].second - 2.0);
  EXPECT_LT(s1, got[false].first + 2.0);
}

TEST(LeaseScheduler, ATenantDueBackTooSoonForACutLeaseIsWaitedFor) {
  // The same two tenants. Once the holder's cut lease has ended, the
  // weight-3 tenant is due back in less than a cut lease: the holder, still
  // wanting the GPU, is not granted a lease that could not end in time (its
  // kernel would run into the return); the GPU waits, at most
  // return_slack past the due time.
  Sim sim;
  sim.add(1, burst(1), {.overrun_ns = kMs, .queue_in_lease = true, .kernel_ns = kMs});
  sim.add(2, burst(3));
  host_gap_steps(sim, 2500 * kUs);  // learns the weight-3 tenant's gaps
  SimTenant& back = sim.tenants[2];
  const std::uint64_t start = back.gpu_ns;
  back.busy = true;
  while (back.gpu_ns < start + 4 * kMs && sim.now < kT0 + 10'000 * kMs) sim.run(100 * kUs);
  back.busy = false;  // and does not come back this time
  const std::uint64_t left = sim.now;
  while (sim.sched.holder() != 1u && sim.now < left + 2 * kMs) sim.run(100 * kUs);
  ASSERT_EQ(sim.sched.holder(), 1u);
  const std::uint64_t cut_end = sim.lease_expiry;
  ASSERT_LT(cut_end, left + 2500 * kUs);  // cut before the return
  while (sim.now <= cut_end) sim.run(100 * kUs);
  // Between the cut lease's end and the due time (plus the slack) nobody
  // holds the GPU; afterwards the holder gets it back.
  sim.run(500 * kUs);
  EXPECT_FALSE(sim.sched.holder().has_value());
  const std::uint64_t given_up = left + 2500 * kUs + SchedulerConfig{}.return_slack_ns;
  while (sim.now < given_up + 500 * kUs) sim.run(100 * kUs);
  EXPECT_EQ(sim.sched.holder(), 1u);
}

TEST(LeaseScheduler, AHolderThatGoesAwayBetweenStepsGivesTheLeaseBackSoon) {
  // A holder whose gaps are host work (2 ms here, at least away_long) gives
  // the lease back away_idle_grace after its drain while another tenant
  // waits, and the daemon is asked to step then; a holder whose gaps are
  // sync bubbles keeps the contended grace (0.3 ms).
  for (const bool away : {true, false}) {
    Sim sim;
    sim.add(1, burst(1));
    sim.add(2, burst(3));
    host_gap_steps(sim, away ? 2 * kMs : 200 * kUs);
    SimTenant& t2 = sim.tenants[2];
    t2.busy = true;
    while (sim.sched.holder() != 2u && sim.now < kT0 + 10'000 * kMs) sim.run(10 * kUs, 10 * kUs);
    sim.run(kMs, 10 * kUs);
    t2.busy = false;
    while (t2.signals.drained_ns < t2.signals.last_submit_ns) sim.run(10 * kUs, 10 * kUs);
    const std::uint64_t drained = t2.signals.drained_ns;
    const LeaseDecision d = sim.sched.step(sim.now);
    if (away) {
      EXPECT_LE(d.next_step_ns, drained + SchedulerConfig{}.away_idle_grace_ns);
    }
    while (sim.sched.holder() == 2u) sim.run(10 * kUs, 10 * kUs);
    const std::uint64_t released_after = sim.now - drained;
    if (away) {
      EXPECT_LE(released_after, 100 * kUs);
    } else {
      EXPECT_GE(released_after, SchedulerConfig{}.contended_idle_grace_ns);
    }
  }
}

TEST(LeaseScheduler, ALeaseWhoseWorkDrainedBeforeItsEndIsChargedUpToTheDrain) {
  // The holder submits for the first 7 ms of its 10 ms lease, then waits at
  // its gate (the next launch would run past the lease) while its queue
  // drains at 7.5 ms: the GPU is idle for the lease's last 2.5 ms, which
  // must not be charged to it. The same with its work still running at the
  // end: the lease and the overrun are charged.
  for (bool drained_early : {true, false}) {
    LeaseScheduler sched;
    std::uint64_t now = kT0;
    TenantSignals sig = grant_lone(sched, capped(30), now);
    ASSERT_EQ(sched.holder(), 1u);
    const std::uint64_t start = now;
    const std::uint64_t drain_at = drained_early ? start + 7500 * kUs : start + 11 * kMs;
    while (sched.holder()) {
      now += 100 * kUs;
      const bool submitting = now <= start + 7 * kMs;
      sig.waiting = submitting ? 0 : 1;
      if (submitting) sig.last_submit_ns = now;
      sig.resumed_ns = start + 100 * kUs;
      sig.busy_processes = now < drain_at ? 1 : 0;
      sig.drained_ns = now < drain_at ? 0 : drain_at;
      sched.set_signals(1, sig);
      sched.step(now);
    }
    for (int i = 0; i < 30; ++i) {  // after the end: the drain is seen
      now += 100 * kUs;
      sig.busy_processes = now < drain_at ? 1 : 0;
      sig.drained_ns = now < drain_at ? 0 : drain_at;
      sched.set_signals(1, sig);
      sched.step(now);
    }
    const std::uint64_t charged = sched.stats(1).attributed_ns;
    if (drained_early) {
      EXPECT_EQ(charged, drain_at - sig.resumed_ns);
    } else {
      EXPECT_EQ(charged, drain_at - sig.resumed_ns);  // lease plus its 1 ms overrun
      EXPECT_EQ(sched.stats(1).refunded_ns, 0u);
    }
  }
}

TEST(LeaseScheduler, ATenantBackFromAShortGapKeepsItsPlaceAndGetsItsDemand) {
  // Weight 3 next to weight 1, but 2 ms of host work after every 4 ms of
  // GPU work: its demand (2/3) is below its entitlement (3/4), so it gets its
  // demand. Levelled as if back from idle after each gap, and made to wait
  // out the other's lease, it got half.
  Sim sim;
  sim.add(1, burst(1));
  sim.add(2, burst(3));
  const auto [s1, s2] = host_gap_steps(sim);
  EXPECT_GT(s2, 60.0);
  EXPECT_GT(s1, 25.0);
}

TEST(LeaseScheduler, ATenantWhoseKernelsOutlastTheGapIsNotGrantedTheGpuInIt) {
  // The weight-1 tenant's work runs 20 ms past every lease's end (long
  // kernels: the GPU keeps one to its end, whatever the lease): granted in
  // the weight-3 tenant's 2 ms host gaps, it kept it waiting for 20 ms at
  // every return.
  for (const bool hold : {false, true}) {
    SchedulerConfig cfg;
    if (!hold) cfg.hold_overrun_ns = std::numeric_limits<std::uint64_t>::max();
    Sim sim(cfg);
    sim.add(1, burst(1), {.overrun_ns = 20 * kMs});
    sim.add(2, burst(3));
    const auto [s1, s2] = host_gap_steps(sim);
    if (hold) {
      EXPECT_GT(s2, 50.0);
      EXPECT_GT(s1, 10.0);  // still served, in full leases when its turn comes
    } else {
      EXPECT_LT(s2, 30.0);  // the behaviour the hold replaces
    }
  }
}

TEST(LeaseScheduler, AnAllocationWithShortKernelsTooIsGrantedTheGapCut) {
  // The same, but a second process of the weight-1 allocation, with short
  // kernels, starts (its 1 ms figure shows in the allocation's per-launch
  // word beside the long one's): once the weight-3 tenant leaves for its
  // host work, the GPU goes to the allocation in a cut lease (its gate
  // starts only the short kernels there, the long ones wait for a whole
  // lease) instead of idling until the return.
  for (const bool short_too : {false, true}) {
    Sim sim;
    sim.add(1, burst(1), {.overrun_ns = 20 * kMs});
    sim.add(2, burst(3));
    const std::uint64_t gap = 2500 * kUs;
    host_gap_steps(sim, gap);  // long kernels only: held for every return
    sim.tenants[1].cut_overrun_ns = short_too ? kMs : 0;
    host_gap_steps(sim, gap);
    SimTenant& back = sim.tenants[2];
    const std::uint64_t start = back.gpu_ns;
    back.busy = true;
    while (back.gpu_ns < start + 4 * kMs && sim.now < kT0 + 10'000 * kMs) sim.run(100 * kUs);
    back.busy = false;
    const std::uint64_t left = sim.now;
    bool granted = false, granted_whole = false;
    while (sim.now < left + gap) {  // until it is due back
      sim.run(100 * kUs);
      if (sim.sched.holder() == 1u) {
        granted = true;
        granted_whole = granted_whole || !sim.lease_cut;
      }
    }
    EXPECT_EQ(granted, short_too);  // held for the return without short kernels
    EXPECT_FALSE(granted_whole);
    if (!short_too) continue;
    // It does not come back: while it is overdue (up to two of its gaps
    // after it left) the holder's leases stay cut, so its long kernels do
    // not start just before a late return; then a whole lease.
    while (sim.now < left + 2 * gap - 200 * kUs) {
      sim.run(100 * kUs);
      if (sim.sched.holder() == 1u) {
        EXPECT_TRUE(sim.lease_cut) << (sim.now - left) / kUs << " us after it left";
      }
    }
    while (sim.now < left + 2 * gap + 2 * kMs) sim.run(100 * kUs);
    EXPECT_EQ(sim.sched.holder(), 1u);
    EXPECT_FALSE(sim.lease_cut);
  }
}

TEST(LeaseScheduler, AdoptedLeaseContinuesAfterRestart) {
  LeaseScheduler s;
  s.set_tenant(7, burst(1), kT0);
  s.set_signals(7, {.waiting = 0, .last_submit_ns = kT0, .drained_ns = 0});
  s.adopt_lease(7, kT0 + 4 * kMs, kT0);
  const LeaseDecision d = s.step(kT0 + kUs);
  ASSERT_EQ(d.holder, 7u);
  EXPECT_GE(d.expiry_ns, kT0 + 4 * kMs);
  EXPECT_FALSE(d.revoked.has_value());
}

TEST(LeaseScheduler, HandoffsAreCounted) {
  Sim sim;
  sim.add(1, burst(1));
  sim.add(2, burst(1));
  sim.run(200 * kMs);
  // ~10 ms each, alternating.
  EXPECT_NEAR(static_cast<double>(sim.sched.stats(1).handoffs), 10.0, 2.0);
  EXPECT_NEAR(static_cast<double>(sim.sched.stats(2).handoffs), 10.0, 2.0);
}

TEST(LeaseScheduler, StepReportsTheNextDeadline) {
  LeaseScheduler s;
  s.set_tenant(1, capped(10), kT0);
  s.set_signals(1, {.waiting = 1});
  LeaseDecision d = s.step(kT0);
  ASSERT_EQ(d.holder, 1u);
  EXPECT_LE(d.next_step_ns, d.expiry_ns);
  EXPECT_GT(d.next_step_ns, kT0);
}

// Inside the extension margin a lease that is not extended (another tenant
// waits, or the holder is capped) is looked at again at its expiry and on the
// daemon's own demand polls, never "now": the daemon sleeps until the step
// it is given, and a step due at every instant had it spin at real-time
// priority through the last 5 ms of such leases, a CPU taken from the tenants.
TEST(LeaseScheduler, ALeaseNotExtendedInItsMarginDoesNotAskForAStepAtOnce) {
  for (const TenantPolicy second : {burst(1), capped(90)}) {
    LeaseScheduler s;
    s.set_tenant(1, burst(1), kT0);
    s.set_tenant(2, second, kT0);
    s.set_signals(1, {.waiting = 1});
    s.set_signals(2, {.waiting = 1});
    const LeaseDecision first = s.step(kT0);
    ASSERT_TRUE(first.holder.has_value());
    const TenantId holder = *first.holder;
    const std::uint64_t margin = s.config().extend_margin_ns;
    s.set_signals(holder, {.last_submit_ns = first.expiry_ns - margin,
                           .expected_drain_ns = first.expiry_ns,
                           .resumed_ns = kT0 + 10 * kUs});
    for (std::uint64_t now = first.expiry_ns - margin + kUs; now < first.expiry_ns;
         now += 500 * kUs) {
      const LeaseDecision d = s.step(now);
      ASSERT_EQ(d.holder, holder);
      EXPECT_EQ(d.expiry_ns, first.expiry_ns) << "not extended: another tenant is owed the GPU";
      EXPECT_GT(d.next_step_ns, now) << "a step due now is a spinning daemon";
      EXPECT_LE(d.next_step_ns, first.expiry_ns);
    }
  }
}

// A holder whose launching thread and poller lose the CPU on a loaded host:
// its thread waits at the gate (demand), it submits nothing, its queue runs
// dry at its published estimate and no drain mark comes. Driven by hand, two
// burst tenants always waiting; returns the holder (granted at kT0).
struct StarvedHolder {
  explicit StarvedHolder(SchedulerConfig cfg = {}) : sched(cfg) {
    sched.set_tenant(1, burst(1), kT0);
    sched.set_tenant(2, burst(1), kT0);
    signal(1, {.waiting = 1});
    signal(2, {.waiting = 1});
    holder = *sched.step(kT0).holder;
    other = holder == 1 ? 2 : 1;
    // It submits for 1 ms, its queue 2 ms ahead, then its thread waits.
    signal(holder, {.waiting = 1,
                    .last_submit_ns = kT0 + kMs,
                    .expected_drain_ns = kT0 + 3 * kMs,
                    .busy_processes = 1,
                    .resumed_ns = kT0 + 10 * kUs});
  }
  void signal(TenantId id, TenantSignals s) { sched.set_signals(id, s); }
  LeaseScheduler sched;
  TenantId holder = 0, other = 0;
};

TEST(LeaseScheduler, AHolderStarvedOfTheCpuGivesWayOnceItsEstimatePassed) {
  StarvedHolder h;
  const std::uint64_t grace = h.sched.config().starved_grace_ns;
  const LeaseDecision before = h.sched.step(kT0 + 3 * kMs + grace - kUs);
  EXPECT_EQ(before.holder, h.holder);
  EXPECT_LE(before.next_step_ns, kT0 + 3 * kMs + grace) << "the daemon wakes when it would starve";
  // The next holder is granted at once: the starved poller's drain mark may
  // come much later, and the estimate says the queue ran out.
  const LeaseDecision d = h.sched.step(kT0 + 3 * kMs + grace);
  EXPECT_EQ(d.holder, h.other);
  EXPECT_EQ(d.revoked, h.holder);
}

TEST(LeaseScheduler, AHolderThatRenewsItsEstimateKeepsTheLease) {
  StarvedHolder h;
  const std::uint64_t grace = h.sched.config().starved_grace_ns;
  // Its waiting thread woke before the estimate passed: the head runs long.
  h.signal(h.holder, {.waiting = 1,
                      .last_submit_ns = kT0 + kMs,
                      .expected_drain_ns = kT0 + 5 * kMs,
                      .busy_processes = 1,
                      .resumed_ns = kT0 + 10 * kUs});
  EXPECT_EQ(h.sched.step(kT0 + 3 * kMs + grace).holder, h.holder);
  EXPECT_EQ(h.sched.step(kT0 + 5 * kMs + grace - kUs).holder, h.holder);
  EXPECT_EQ(h.sched.step(kT0 + 5 * kMs + grace).holder, h.other);
}

TEST(LeaseScheduler, AStarvedHolderIsChargedUpToItsEstimatedDrain) {
  StarvedHolder h;
  const std::uint64_t grace = h.sched.config().starved_grace_ns;
  const std::uint64_t released = kT0 + 3 * kMs + grace;
  h.sched.step(released);
  // Its poller runs at last and publishes the drain (on the GPU's clock).
  h.signal(h.holder, {.waiting = 1,
                      .last_submit_ns = kT0 + kMs,
                      .drained_ns = kT0 + 3 * kMs,
                      .expected_drain_ns = kT0 + 3 * kMs,
                      .resumed_ns = kT0 + 10 * kUs});
  h.sched.step(released + 5 * kMs);
  const TenantStats st = h.sched.stats(h.holder);
  // From its first launch to its drain, not the grace after it.
  EXPECT_NEAR(static_cast<double>(st.attributed_ns), static_cast<double>(3 * kMs - 10 * kUs),
              static_cast<double>(20 * kUs));
}

TEST(LeaseScheduler, AHolderThatHasNotLaunchedUnderItsLeaseIsNotStarved) {
  // Its thread has not woken for the grant yet: that is hand-off cost.
  StarvedHolder h;
  h.signal(h.holder, {.waiting = 1,
                      .last_submit_ns = kT0 - 20 * kMs,
                      .expected_drain_ns = kT0 - 18 * kMs,
                      .busy_processes = 0,
                      .resumed_ns = kT0 - 20 * kMs});
  EXPECT_EQ(h.sched.step(kT0 + 2 * kMs).holder, h.holder);
  EXPECT_EQ(h.sched.stats(h.holder).grants, 1u) << "given back and granted again";
}

TEST(LeaseScheduler, NoStarvationJudgedOnOneOfSeveralBusyProcesses) {
  // Each process publishes its own estimate: the latest is not the allocation's.
  StarvedHolder h;
  h.signal(h.holder, {.waiting = 1,
                      .last_submit_ns = kT0 + kMs,
                      .expected_drain_ns = kT0 + 3 * kMs,
                      .busy_processes = 2,
                      .resumed_ns = kT0 + 10 * kUs});
  EXPECT_EQ(h.sched.step(kT0 + 5 * kMs).holder, h.holder);
}

TEST(LeaseScheduler, AStarvedHolderKeepsTheLeaseNobodyElseWants) {
  StarvedHolder h;
  h.signal(h.other, {.waiting = 0});
  EXPECT_EQ(h.sched.step(kT0 + 5 * kMs).holder, h.holder);
}

// Tenant 1 (weight 1) uses a whole lease, then tenant 2 (weight 4), far
// behind it in virtual time, holds the lease, submits for 1 ms and starves:
// its threads are off the CPU. `lead` is charged to tenant 1 on top (as the
// ground-truth backstop does) before tenant 2 is found starved. Returns the
// step that judges the starvation.
LeaseDecision starve_the_least_served(LeaseScheduler& sched, std::uint64_t lead) {
  sched.set_tenant(1, burst(1), kT0);
  sched.set_tenant(2, burst(4), kT0);
  sched.set_signals(1, {.waiting = 1});
  sched.set_signals(2, {.waiting = 0});
  EXPECT_EQ(sched.step(kT0).holder, 1u);
  const std::uint64_t t1_end = kT0 + 10 * kMs;
  for (std::uint64_t t = kT0 + 100 * kUs; t < t1_end; t += 100 * kUs) {
    sched.set_signals(1, {.last_submit_ns = t,
                          .expected_drain_ns = t + 50 * kUs,
                          .busy_processes = 1,
                          .resumed_ns = kT0 + 50 * kUs});
    sched.set_signals(2, {.waiting = 1});
    sched.step(t);
  }
  sched.set_signals(1, {.waiting = 1,
                        .last_submit_ns = t1_end - 100 * kUs,
                        .drained_ns = t1_end - 50 * kUs,
                        .expected_drain_ns = t1_end - 50 * kUs,
                        .resumed_ns = kT0 + 50 * kUs});
  EXPECT_EQ(sched.step(t1_end).holder, 2u);
  sched.set_signals(2, {.waiting = 1,
                        .last_submit_ns = t1_end + kMs,
                        .expected_drain_ns = t1_end + 3 * kMs,
                        .busy_processes = 1,
                        .resumed_ns = t1_end + 20 * kUs});
  sched.charge_unleased(1, lead);
  return sched.step(t1_end + 3 * kMs + sched.config().starved_grace_ns);
}

TEST(LeaseScheduler, AStarvedHolderIsNotGrantedAgainWhileAnotherWaits) {
  // Tenant 1 is a lease's worth of its own virtual time ahead at most: it
  // would be next soon anyway, and the GPU does not idle meanwhile.
  LeaseScheduler sched;
  const LeaseDecision d = starve_the_least_served(sched, 0);
  EXPECT_EQ(d.holder, 1u);
  EXPECT_EQ(d.revoked, 2u);
}

TEST(LeaseScheduler, AStarvedHolderIsGrantedAgainBeforeATenantFarAheadOfIt) {
  // Tenant 1 is more than a lease of its own ahead: passing tenant 2 over
  // would let it run (a GPU keeps a launched kernel to its end) at every
  // stall of tenant 2's threads, beyond its weight.
  LeaseScheduler sched;
  const LeaseDecision d = starve_the_least_served(sched, 40 * kMs);
  EXPECT_EQ(d.holder, 2u);
  EXPECT_EQ(sched.stats(2).grants, 2u) << "given back starved and granted again";
}

TEST(LeaseScheduler, AStarvedHolderNobodyElseWantsIsGrantedAgain) {
  StarvedHolder h;
  const std::uint64_t released = kT0 + 3 * kMs + h.sched.config().starved_grace_ns;
  ASSERT_EQ(h.sched.step(released).holder, h.other);
  // The other tenant is done at once; the starved one still waits.
  h.signal(h.other, {.waiting = 0});
  const std::uint64_t later = released + 10 * kMs;
  EXPECT_EQ(h.sched.step(later).holder, h.holder);
}

TEST(LeaseScheduler, TheNextHolderIsToldBeforeItsGrant) {
  // Weights 1:3, the weight-3 tenant with 2 ms of host work per 4 ms of GPU
  // work, the weight-1 one busy with 1 ms kernels: every grant goes to a
  // tenant told ahead, the waiting one at least most of ready_ahead before
  // (time for its thread to leave the futex and reach a CPU), the one back
  // from host work by the time it returns.
  Sim sim;
  sim.add(1, burst(1), {.overrun_ns = kMs, .queue_in_lease = true, .kernel_ns = kMs});
  sim.add(2, burst(3));
  host_gap_steps(sim);
  for (const TenantId id : {1u, 2u}) {
    const std::vector<std::int64_t>& ahead = sim.told_ahead[id];
    ASSERT_GT(ahead.size(), 300u);
    std::vector<std::int64_t> told;
    for (std::size_t i = 20; i < ahead.size(); ++i)
      if (ahead[i] >= 0) told.push_back(ahead[i]);
    EXPECT_GE(told.size(), (ahead.size() - 20) * 95 / 100) << "tenant " << id;
    std::sort(told.begin(), told.end());
    EXPECT_GE(told[told.size() / 2], static_cast<std::int64_t>(id == 1 ? 1500 * kUs : 100 * kUs))
        << "tenant " << id;
  }
}

TEST(LeaseScheduler, NobodyIsToldOnLongLeases) {
  // Two busy tenants on full leases: a hand-off per lease, the wake-up a
  // small part of it; nobody is told (its thread would spin beside the
  // holder's for nothing much).
  Sim sim;
  sim.add(1, burst(1));
  sim.add(2, burst(1));
  int told = 0;
  for (int i = 0; i < 2000; ++i) {
    sim.run(100 * kUs);
    if (sim.ready_id) ++told;
  }
  EXPECT_EQ(told, 0);
  EXPECT_GT(sim.grants_seen, 5);
}

}  // namespace
}  // namespace cushare::sched
