// The lease scheduler of one GPU: pure policy, no I/O, clock injected through
// every call. The daemon feeds it the tenants' signals (demand, drain marks)
// read from the usage regions and publishes the lease it returns into the
// limits regions (docs/scheduler.md).
//
// Model: one allocation at a time holds an exclusive lease and may submit
// work until the lease expires. GPU time is attributed without overlap: the
// holder owns the time from its grant (or from the moment the previous
// holder's queued work drained, whichever is later) until its lease ended
// and its own queued work drained (overrun), less the gaps in which it had
// nothing on the GPU (reported by its gate): busy time. Attributed time drives
//  - weighted fair queueing: next holder = least virtual time
//    (attributed time / weight) among tenants with demand;
//  - the cap of `capped` tenants, enforced as a rate with a bounded bank:
//    each attributed ns advances the tenant's cap clock by 1/(limit x scale)
//    ns and it may only be granted while its cap clock is not ahead of now;
//    the clock never lags now by more than cap_bank_ns, so in any interval T
//    it is charged at most limit x scale x (T + cap_bank) plus one quantum.
//    The scale (1 to kMaxBusyScale, set_busy_scale) is the lease time ground
//    truth finds per ns of the tenant's GPU time: the cap holds for GPU time.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "scheduler/entitlement.hpp"

namespace cushare::sched {

using TenantId = std::uint32_t;

// The most lease time a capped tenant is given per ns of its cap
// (set_busy_scale; sched::LeaseBusyRatio measures it).
inline constexpr double kMaxBusyScale = 1.25;

struct SchedulerConfig {
  std::uint64_t quantum_ns = 10'000'000;
  // A holder with no waiting thread, nothing in flight and no submission for
  // this long gives the lease back early (work-conserving).
  std::uint64_t idle_grace_ns = 2'000'000;
  // The same while another tenant waits for the GPU: the holder's idle time
  // is refunded to it (it is charged busy time), so holding the GPU idle
  // costs only the others; a short gap (a sync bubble) is still bridged.
  std::uint64_t contended_idle_grace_ns = 300'000;
  // A holder that usually stays away at least away_long_ns once it gives a
  // lease back idle (its gap_ns: host work between steps, not a sync bubble)
  // gives it back this soon after its drain while another tenant waits, and
  // the daemon looks for that drain from when the holder expects it: each
  // such hand-off otherwise cost the grace above plus up to a demand poll
  // (0.78 ms of a 6.8 ms cycle, weights 1:3 with 2 ms of host work per 4 ms
  // of GPU work). One that comes back sooner than that lowers its gap_ns.
  std::uint64_t away_idle_grace_ns = 50'000;
  std::uint64_t away_long_ns = 1'000'000;
  // Such a tenant due back in less than min_cut_lease (or late by less than
  // this) is waited for, the GPU idle, rather than another one granted a
  // lease that could not end before the return: the returning tenant would
  // then wait for that lease's queue. Weights 1:3, 1 ms kernels, 2 ms of
  // host work per 4 ms of GPU work: the weight-3 tenant 59.3 -> 61.6 %.
  std::uint64_t return_slack_ns = 500'000;
  // A holder whose thread waits at its gate while its work ran out this long
  // ago, by its own estimate (expected_drain_ns) and with nothing submitted
  // since, gives the lease back while another tenant waits. A thread that
  // waits for its queue renews the estimate each time it wakes, which is
  // before the estimate passes, so one that did not is not getting a CPU (a
  // loaded host) and the GPU idles under its lease; so does the poller that
  // would publish the drain, so the estimate is what there is.
  std::uint64_t starved_grace_ns = 300'000;
  // A holder given back starved is passed over for a tenant at most this
  // many leases of its own ahead of it in virtual time; beyond, the starved
  // one is granted again. A GPU keeps a launched kernel to its end, so the
  // one chosen in its place keeps the GPU for its whole kernel, however soon
  // the starved threads return: unbounded, a weight-10 tenant with 20 ms
  // kernels got one in at every stall of a weight-90 one's threads and ran
  // at 15-30 % with a fifth of the CPU stolen. One lease cost the busier
  // tenant a tenth of its use where the other's kernels (5 ms) fit its
  // stalls; two keep both.
  std::uint64_t starved_lead_leases = 2;
  // Work of a former holder still running this long after its lease ended is
  // no longer charged to it (hung kernel, lost drain marks).
  std::uint64_t drain_bound_ns = 100'000'000;
  // A lease is extended in place when this little of it is left and the
  // holder would be chosen again.
  std::uint64_t extend_margin_ns = 5'000'000;
  // A burst holder that no other tenant waits for keeps its lease this many
  // quanta ahead: its gate then never waits for a daemon step that comes
  // late (a loaded host, a daemon at normal priority) while nobody else
  // needs the GPU. Once another tenant wants it, the lease is cut back to
  // the extension margin, so the newcomer waits no longer than before.
  // 1: a lone lease is extended like any other.
  std::uint64_t lone_lease_quanta = 4;
  // A lease lasts at least this many times the GPU time recently lost per
  // hand-off (from the former holder's drain to the next holder's first
  // launch: the drain's publication, the daemon's and the woken thread's way
  // to a CPU), so hand-offs cost at most about 1/lease_per_handoff of the
  // device; up to max_lease_quanta quanta. Where a hand-off costs under
  // 100 us leases stay at one quantum; on the development VM (about 200 us:
  // every wake-up there waits for the hypervisor) they are two; where
  // wake-ups take milliseconds (CPU-bound neighbours, a daemon at normal
  // priority, a hypervisor taking the CPU), they grow further instead of the
  // device idling. What it costs: a waiting tenant waits up to a lease per
  // tenant ahead of it. At 40 (2.5 %) four equal tenants there lost 2 points
  // of the device at hand-offs, against the 2 the acceptance allows in all.
  std::uint64_t lease_per_handoff = 100;
  std::uint64_t max_lease_quanta = 4;
  // How far a capped tenant's cap clock may lag behind now: time it spent
  // eligible but waiting for another holder's lease is made up for, up to
  // this much; idle time beyond it is not banked. Bound: in any interval T a
  // capped tenant is charged at most limit x (T + cap_bank) + one quantum.
  std::uint64_t cap_bank_ns = 30'000'000;
  // A new holder is granted only once the former holder's queued work is
  // seen drained (or the drain bound passed): its work would otherwise share
  // the GPU with the overrun. The daemon starts polling for the drain this
  // long before the former holder's expected end: the estimate is often
  // high by most of a kernel, and a drain seen late leaves the GPU idle.
  std::uint64_t handoff_lead_ns = 1'000'000;
  // How often to look for the drain while a hand-off waits for it.
  std::uint64_t drain_poll_ns = 50'000;
  // A lease is charged from the holder's first launch after the grant, not
  // from the grant: the time its waiting thread takes to wake up leaves the
  // GPU idle and is hand-off cost, like the drain observation. Only a first
  // launch within this grace counts; a lease without one is charged from
  // its grant (so at most this much of a lease goes uncharged).
  std::uint64_t resume_grace_ns = 2'000'000;
  // Idle gaps a tenant reports are refunded only against lease time charged
  // to it recently: at most this much of its latest charges can be refunded
  // (a forged idle_ns cannot buy more than that; ground truth is the
  // backstop for the rest).
  std::uint64_t refund_horizon_ns = 20'000'000;
  // A tenant that comes back after at most this long without demand keeps
  // its virtual time (a host gap between steps is not idling); after longer
  // it starts level with the least-served busy tenant (no banked credit).
  std::uint64_t level_after_ns = 20'000'000;
  // A holder that has run this long in its lease gives way to a waiting
  // tenant more than a quantum of its own virtual time behind it (one that
  // came back from a short gap), instead of making it wait out the lease.
  std::uint64_t preempt_after_ns = 1'000'000;
  // A lease given back for idleness may have raced a launch that passed the
  // gate just before: its submission (or busy mark) shows up only after the
  // release. For this long after such a release, a submission from before
  // it still counts as the lease's, and its work is charged as overrun.
  std::uint64_t late_submit_ns = 500'000;
  // A lease granted (or extended) while a tenant that would preempt the
  // holder is away for a short gap ends where that tenant is expected back
  // (when it left plus its usual gap), less half of one of the holder's
  // launches (its gate starts a launch up to the expiry, and the GPU runs it
  // to its end), if the return is at least this far off, and never sooner
  // than this: the holder's gate keeps its queue inside the lease, so the
  // GPU is free when the tenant returns instead of draining the holder's
  // queue first.
  std::uint64_t min_cut_lease_ns = 1'000'000;
  // The GPU runs a launched kernel to its end, so such a cut does not help
  // where the holder's work runs on past its leases (long kernels): a tenant
  // whose work has recently run this much past the expiries of its leases
  // (on average; its gate keeps its queue inside them) is not granted the GPU while a tenant that
  // would preempt it is away for a short gap; the GPU waits for the returning one instead, at most
  // a gap past its expected return (and level_after after it left). Granted, it kept the returning
  // tenant waiting for a kernel at every gap: weights 1:3, the weight-1 tenant with 1 ms and 20 ms
  // kernels, the weight-3 one with 2 ms of host work per 4 ms of GPU work: 79.7 / 15.1.
  std::uint64_t hold_overrun_ns = 5'000'000;
  // Unless one of its processes has short kernels: a per-launch figure (the
  // allocation's processes publish theirs in turn) of at most
  // short_kernel_ns within the last short_kernels_window_ns. Its gates keep
  // the long kernels out of a cut lease (shm::kLeaseCutBit), so the short
  // ones use the returning tenant's gap and the long ones wait for a whole
  // lease. Held idle instead, two processes of one allocation (1 ms and
  // 20 ms kernels) beside a weight-3 tenant with host gaps got 17.6 / 53.8.
  std::uint64_t short_kernel_ns = 2'000'000;
  std::uint64_t short_kernels_window_ns = 100'000'000;
  // A tenant due back from a short gap and already late is still waited
  // for (up to two of its gaps after it left) where the holder has run long
  // kernels (a per-launch figure or overrun of hold_overrun_ns or more)
  // within long_kernels_window_ns: its leases are cut to min_cut_lease, so
  // its gate starts only short kernels (shm::kLeaseCutBit). Cut for every
  // holder, four equal tenants with host gaps beside CPU hogs lost ~2
  // points of the device to the extra hand-offs.
  std::uint64_t long_kernels_window_ns = 10'000'000'000;
  // The tenant the next grant most likely goes to is told so once the
  // hand-off is expected within ready_ahead_ns, and its threads waiting for
  // the lease wait on the CPU until ready_slack_ns past the expected moment
  // (LeaseDecision::ready) instead of asleep: a thread woken from its futex
  // for the grant waited for a CPU, on the development VM 0.5-2 ms at one
  // grant in five (weights 1:3 with host gaps: the device 86-88 % busy).
  std::uint64_t ready_ahead_ns = 2'000'000;
  std::uint64_t ready_slack_ns = 500'000;
  // Only where hand-offs come often: a lease expected to last longer than
  // this is handed on as before (four equal tenants syncing after every
  // 1 ms kernel, on 20 ms leases, lost a point of the device to the spin
  // beside the holder's own threads on 2 CPUs, and gained nothing).
  std::uint64_t ready_max_lease_ns = 8'000'000;
  // A holder with no thread at its gate that has submitted nothing for this
  // long has stopped launching (it syncs before host work): its expected
  // drain then says when it hands off (handoff_expected).
  std::uint64_t stopped_submitting_ns = 250'000;
  // Window of the achieved-share figure.
  std::uint64_t achieved_window_ns = 10'000'000'000;
  // A tenant counts as active for the entitlement if it had demand this recently.
  std::uint64_t active_window_ns = 1'000'000'000;
};

// What the daemon reads from a tenant's usage region on every step.
struct TenantSignals {
  std::uint32_t waiting = 0;            // processes with a thread held at the launch gate
  std::uint64_t last_submit_ns = 0;     // CLOCK_MONOTONIC of its last submission
  std::uint64_t drained_ns = 0;         // all work submitted up to here completed
  std::uint64_t expected_drain_ns = 0;  // when its submitted work should be done (estimate)
  // Processes with work in flight. While one is, drained_ns (published by
  // whichever process last saw its own queue empty) does not speak for the
  // allocation.
  std::uint32_t busy_processes = 0;
  // When a thread last went on from the gate after waiting for a lease.
  std::uint64_t resumed_ns = 0;
  // Cumulative GPU time the allocation had nothing on the GPU inside its
  // leases (gaps between spells of work, measured by the gate on the GPU's
  // clock). Its growth is refunded: leases are charged busy time.
  std::uint64_t idle_ns = 0;
  // The GPU time of one of its launches, on average, by its gate (0: not
  // measured). Only places the end of a cut lease (lease_end).
  std::uint64_t per_launch_ns = 0;

  // All work submitted up to `mark` is known complete.
  bool drained_past(std::uint64_t mark) const { return busy_processes == 0 && drained_ns >= mark; }
};

struct TenantStats {
  // Which time the tenant joined a scheduler: distinct for every join in
  // the process, so a reader of these counters tells a tenant that left and
  // came back (counters from zero) from one whose attributed_ns went down
  // by a refund.
  std::uint64_t incarnation = 0;
  std::uint64_t attributed_ns = 0;  // GPU time charged so far, less refunds (can go down)
  std::uint64_t grants = 0;
  std::uint64_t granted_ns = 0;    // total lease time granted (incl. extensions)
  std::uint64_t handoffs = 0;      // leases this tenant handed to another one
  std::uint64_t unleased_ns = 0;   // charged from ground truth (charge_unleased), in attributed_ns
  std::uint64_t refunded_ns = 0;   // idle gaps inside leases taken back out of attributed_ns
  std::uint32_t target_ppm = 0;    // entitlement among the active tenants
  std::uint32_t achieved_ppm = 0;  // attributed share of the last achieved window
  bool holder = false;
};

// The lease to publish after a step.
struct LeaseDecision {
  std::optional<TenantId> holder;
  std::uint64_t expiry_ns = 0;      // holder may submit while now < expiry
  std::optional<TenantId> revoked;  // former holder whose lease words must be cleared
  bool changed = false;             // holder or expiry changed: publish and wake
  // The lease ends where another tenant is due back (lease_end): the
  // holder's gate starts only launches expected to end about then
  // (shm::kLeaseCutBit), its long kernels wait for a whole lease.
  bool cut = false;
  std::uint64_t next_step_ns = 0;  // call step() again no later than this
  // The tenant the next grant most likely goes to, once the hand-off is
  // expected within ready_ahead_ns, and until when its threads waiting for
  // the lease should wait on the CPU (SchedulerConfig::ready_ahead_ns).
  std::optional<TenantId> ready;
  std::uint64_t ready_until_ns = 0;
};

class LeaseScheduler {
 public:
  explicit LeaseScheduler(SchedulerConfig config = {});

  // Adds a tenant or changes its policy (live limit changes).
  void set_tenant(TenantId id, const TenantPolicy& policy, std::uint64_t now);
  // The tenant is gone (all its processes died, its folder vanished): its
  // lease ends now and its queued work is not charged any further.
  void remove_tenant(TenantId id, std::uint64_t now);
  bool has_tenant(TenantId id) const { return tenants_.contains(id); }
  void set_signals(TenantId id, const TenantSignals& signals);

  // Charges GPU time that ground truth (NVML) says the tenant used beyond what
  // its leases were charged: it counts for fair queueing and the cap like
  // lease time (not in the achieved-share window, which follows the leases).
  void charge_unleased(TenantId id, std::uint64_t ns);

  // Lease time charged per ns of GPU time ground truth shows (clamped to
  // [1, kMaxBusyScale]; sched::LeaseBusyRatio): a capped tenant's cap clock
  // advances by its lease charge divided by this, so that the cap holds for
  // GPU time.
  void set_busy_scale(TenantId id, double scale);

  // Continues a lease found in the regions at start-up (daemon restart).
  void adopt_lease(TenantId id, std::uint64_t expiry_ns, std::uint64_t now);

  LeaseDecision step(std::uint64_t now);

  TenantStats stats(TenantId id) const;
  std::optional<TenantId> holder() const { return holder_; }
  // The length of a lease granted now (lease_per_handoff).
  std::uint64_t lease_length_ns() const;
  // The GPU time recently lost per hand-off (a moving average).
  std::uint64_t handoff_cost_ns() const { return static_cast<std::uint64_t>(handoff_cost_ns_); }
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Tenant {
    TenantPolicy policy;
    TenantSignals signals;
    double vtime = 0;       // attributed ns / weight
    double cap_clock = 0;   // capped only: earliest time of the next grant
    double busy_scale = 1;  // set_busy_scale()
    std::uint64_t last_demand_ns = 0;
    bool was_candidate = false;
    std::uint64_t left_at_ns = 0;  // when it last stopped wanting the GPU
    std::uint64_t gap_ns = 0;      // its usual time away (EMA of gaps up to level_after)
    std::uint64_t back_at_ns = 0;  // when it last started wanting the GPU
    // Its usual spell between two gaps of at least away_long: how long it
    // wants the GPU once back (EMA of spells up to level_after).
    std::uint64_t spell_ns = 0;
    std::uint64_t overrun_ns = 0;        // how far its work runs past its leases' expiries (EMA)
    std::uint64_t short_kernels_ns = 0;  // last seen with short kernels (short_kernel_ns)
    std::uint64_t long_kernels_ns = 0;   // last seen with long kernels (long_kernels_window_ns)
    bool removed = false;
    bool idle_known = false;           // signals.idle_ns seen once (baseline)
    std::uint64_t pending_refund = 0;  // reported idle not refunded yet
    std::uint64_t refundable = 0;      // recent lease charge a refund may take back
    // The idle grace refunded when its lease was given back for idleness:
    // taken back if a submission from before the release shows up (its gate
    // then measures that gap itself, and the time after it was use).
    struct ReleaseRefund {
      std::uint64_t amount = 0, idle_since = 0, released_at = 0;
    } release_refund;
    TenantStats stats;
    std::deque<std::pair<std::uint64_t, std::uint64_t>> history;  // attributed intervals
  };
  // One lease, kept until the GPU time it covers is fully attributed.
  struct LeaseRecord {
    TenantId tenant;
    std::uint64_t start_ns;
    std::uint64_t end_ns = 0;                    // 0 while held
    std::uint64_t submit_mark_ns = 0;            // tenant's last submission when the lease ended
    std::optional<std::uint64_t> drained_at_ns;  // when its queued work finished
    std::optional<std::uint64_t> begun_ns;       // charged from here (see resume_grace_ns)
    bool idle_release = false;                   // given back for idleness (late_submit_ns)
    bool ran_dry = false;  // given back starved: its work ended by its estimate (starved_grace_ns)
    bool ended_idle = false;  // its work drained before its end (drained_at_ns < end_ns)
    // Ended at its expiry or preempted while another tenant waited: the
    // next lease's start measures the hand-off's cost.
    bool handed_over = false;
    bool handoff_measured = false;
    // Ran to its expiry, which the holder's gate knew in advance: its queue
    // was kept inside it, so what ran on past it was the last kernel
    // (Tenant::overrun_ns). (A preempted lease's queue drains after it.)
    bool at_expiry = false;
  };

  void attribute(std::uint64_t now);
  void attribute_leases(std::uint64_t now);
  // `r`, now first in line and begun: what its hand-off cost.
  void measure_handoff(LeaseRecord& r);
  std::optional<std::uint64_t> lease_begins(const LeaseRecord& r, const Tenant* t,
                                            std::uint64_t now) const;
  void charge(Tenant& t, std::uint64_t from, std::uint64_t to);
  void refund(Tenant& t);
  void settle_release_refund(Tenant& t);
  void end_lease(std::uint64_t now, bool idle = false, bool ran_dry = false);
  void grant(TenantId id, std::uint64_t now);
  bool holder_idle(const Tenant& t, std::uint64_t now) const;
  // How long the holder may idle before its lease goes back.
  std::uint64_t idle_grace(const Tenant& t, std::uint64_t now) const;
  // When the holder's last activity was, if it is idle now (drained, no
  // thread waiting); nullopt otherwise.
  std::optional<std::uint64_t> idle_since(const Tenant& t) const;
  bool holder_starved(const Tenant& t, std::uint64_t now) const;
  std::optional<std::uint64_t> starved_deadline(const Tenant& t) const;
  bool contended(const Tenant& t, std::uint64_t now) const;
  bool wants_gpu(TenantId id, const Tenant& t, std::uint64_t now) const;
  std::optional<TenantId> choose(std::uint64_t now);
  std::optional<TenantId> choose(std::uint64_t now, bool skip_starved) const;
  bool starved_now(const Tenant& t, std::uint64_t now) const;
  bool still_first_at_expiry(std::uint64_t now) const;
  // Whether a tenant other than the holder wants the GPU.
  bool others_want_gpu(std::uint64_t now) const;
  // Whether a tenant other than the holder stopped wanting it at most
  // level_after ago (between two steps of its work).
  bool others_away_briefly(std::uint64_t now) const;
  std::uint64_t lone_lease_ns() const;
  // Whether holder `h` is a burst tenant nobody else needs the GPU beside.
  bool alone(const Tenant& h, std::uint64_t now) const;
  // Extends the running lease in place, or cuts a lone lease back.
  void extend_or_cut(Tenant& h, std::uint64_t now);
  bool preempted(std::uint64_t now) const;
  std::uint64_t lease_end(TenantId holder, std::uint64_t now) const;
  // How long before a returning tenant's due time a lease cut for it ends.
  std::uint64_t cut_lead(const Tenant& holder) const;
  // Whether the holder's gate would start a launch in a cut lease `length_ns` long.
  bool fits_cut_lease(const Tenant& holder, std::uint64_t length_ns, std::uint64_t now) const;
  // Until when the GPU waits for a returning tenant instead of going to
  // `next` (hold_overrun_ns); 0: it does not.
  std::uint64_t hold_for_return(TenantId next, std::uint64_t now) const;
  std::uint64_t handoff_deferral(TenantId next, std::uint64_t now) const;
  struct Ready {
    TenantId id = 0;
    std::uint64_t until_ns = 0;
  };
  std::optional<Ready> ready(std::optional<TenantId> deferred, std::uint64_t now) const;
  std::uint64_t handoff_expected(std::uint64_t now, bool signals) const;
  void refresh_shares(std::uint64_t now);
  std::uint64_t next_deadline(std::uint64_t now) const;

  SchedulerConfig config_;
  std::map<TenantId, Tenant> tenants_;
  std::deque<LeaseRecord> records_;
  std::uint64_t cursor_ns_ = 0;  // GPU time before this is attributed
  std::optional<TenantId> holder_;
  std::uint64_t expiry_ns_ = 0;
  bool expiry_cut_ = false;  // the lease ends where a tenant is expected back (lease_end)
  bool published_cut_ = false;
  std::optional<TenantId> last_holder_;
  std::uint64_t lease_start_ns_ = 0;  // when the current (or last) lease was granted
  std::uint64_t last_share_refresh_ns_ = 0;
  std::uint64_t first_step_ns_ = 0;
  std::optional<TenantId> published_holder_;
  std::uint64_t published_expiry_ns_ = 0;
  // The last attributed record: where its work ended, and whether it was
  // handed over (measure_handoff).
  std::uint64_t last_done_ns_ = 0;
  bool last_handed_over_ = false;
  double handoff_cost_ns_ = 0;
};

}  // namespace cushare::sched
