#include "scheduler/lease_scheduler.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "shm/daemon_timing.hpp"
#include "shm/layout.hpp"

namespace cushare::sched {
namespace {

// Times from the tenants' words can be anything: sums of them must not wrap.
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

double weight_of(const TenantPolicy& p) {
  return std::max<std::uint32_t>(p.weight, 1);
}

double cap_fraction(const TenantPolicy& p) {
  return std::clamp<std::uint32_t>(p.limit_pct, 1, 100) / 100.0;
}

// Lease time a capped tenant may be charged per ns of wall time: its cap,
// scaled by the lease time ground truth finds per ns of its GPU time.
double lease_cap_rate(const TenantPolicy& p, double busy_scale) {
  return cap_fraction(p) * busy_scale;
}

// Process-wide: a "*" tenant moves between the schedulers of two GPUs.
std::atomic<std::uint64_t> next_incarnation{1};

}  // namespace

LeaseScheduler::LeaseScheduler(SchedulerConfig config) : config_(config) {
  config_.quantum_ns = std::max<std::uint64_t>(config_.quantum_ns, 100'000);
  config_.extend_margin_ns = std::min(config_.extend_margin_ns, config_.quantum_ns);
  config_.lone_lease_quanta = std::max<std::uint64_t>(config_.lone_lease_quanta, 1);
  config_.max_lease_quanta = std::max<std::uint64_t>(config_.max_lease_quanta, 1);
}

std::uint64_t LeaseScheduler::lease_length_ns() const {
  const double want = handoff_cost_ns_ * static_cast<double>(config_.lease_per_handoff);
  const std::uint64_t most = config_.max_lease_quanta * config_.quantum_ns;
  if (want <= static_cast<double>(config_.quantum_ns)) return config_.quantum_ns;
  return std::min(most, static_cast<std::uint64_t>(want));
}

void LeaseScheduler::measure_handoff(LeaseRecord& r) {
  r.handoff_measured = true;
  if (!last_handed_over_ || !r.begun_ns) return;
  // The GPU was free from the former holder's drain until this holder's
  // first launch. One bad sample counts for at most a drain bound.
  const std::uint64_t lost = *r.begun_ns > last_done_ns_ ? *r.begun_ns - last_done_ns_ : 0;
  const double sample = static_cast<double>(std::min(lost, config_.drain_bound_ns));
  handoff_cost_ns_ = handoff_cost_ns_ == 0 ? sample : (handoff_cost_ns_ * 7 + sample) / 8;
}

void LeaseScheduler::set_tenant(TenantId id, const TenantPolicy& policy, std::uint64_t now) {
  auto [it, inserted] = tenants_.try_emplace(id);
  Tenant& t = it->second;
  if (inserted) {
    // A newcomer starts level with the least-served tenant: it can neither
    // bank credit from before it existed nor be starved by old debts.
    double min_vtime = std::numeric_limits<double>::max();
    for (const auto& [oid, o] : tenants_) {
      if (oid != id && !o.removed) min_vtime = std::min(min_vtime, o.vtime);
    }
    t.vtime = min_vtime == std::numeric_limits<double>::max() ? 0 : min_vtime;
    t.cap_clock = static_cast<double>(now);
    t.stats.incarnation = next_incarnation.fetch_add(1, std::memory_order_relaxed);
  }
  t.policy = policy;
  t.removed = false;
}

void LeaseScheduler::remove_tenant(TenantId id, std::uint64_t now) {
  auto it = tenants_.find(id);
  if (it == tenants_.end()) return;
  attribute(now);
  if (holder_ == id) end_lease(now);
  // Its queued work died with it: stop charging it at once.
  for (LeaseRecord& r : records_) {
    if (r.tenant == id && r.end_ns != 0 && !r.drained_at_ns)
      r.drained_at_ns = std::max(now, r.end_ns);
  }
  it->second.removed = true;
  attribute(now);  // may erase it already
  if (std::none_of(records_.begin(), records_.end(),
                   [id](const LeaseRecord& r) { return r.tenant == id; })) {
    tenants_.erase(id);
  }
}

void LeaseScheduler::set_signals(TenantId id, const TenantSignals& signals) {
  auto it = tenants_.find(id);
  if (it == tenants_.end()) return;
  Tenant& t = it->second;
  // A counter that went backwards (the region was rewritten) is a new
  // baseline, not a refund.
  if (t.idle_known && signals.idle_ns > t.signals.idle_ns) {
    t.pending_refund = std::min(t.pending_refund + (signals.idle_ns - t.signals.idle_ns),
                                config_.refund_horizon_ns);
  }
  t.idle_known = true;
  t.signals = signals;
  settle_release_refund(t);
}

// A launch that passed the gate just before the lease was given back for
// idleness publishes its submission after the release (stamped after its
// gate check, so possibly later than the release): the holder was not idle
// up to the release, its gate reports the gap up to that launch, and the
// release's refund would count it twice. Charged back then.
void LeaseScheduler::settle_release_refund(Tenant& t) {
  auto& r = t.release_refund;
  if (r.amount == 0) return;
  // A launch after a real comeback waited for a new lease, and the first
  // to go on then stamped resumed_ns; one that raced the release did not.
  const std::uint64_t submit = t.signals.last_submit_ns;
  if (submit > r.idle_since && t.signals.resumed_ns <= r.released_at) {
    const std::uint64_t a = r.amount;
    t.stats.attributed_ns += a;
    t.stats.refunded_ns -= std::min(a, t.stats.refunded_ns);
    t.vtime += static_cast<double>(a) / weight_of(t.policy);
    if (t.policy.mode == Mode::kCapped)
      t.cap_clock += static_cast<double>(a) / lease_cap_rate(t.policy, t.busy_scale);
    r = {};
  } else if (submit > r.idle_since) {
    r = {};  // it came back through a new lease: the refund stands
  }
}

// Takes reported idle gaps back out of the tenant's recent lease charges.
void LeaseScheduler::refund(Tenant& t) {
  const std::uint64_t r = std::min(t.pending_refund, t.refundable);
  if (r == 0) return;
  t.pending_refund -= r;
  t.refundable -= r;
  t.stats.attributed_ns -= std::min(r, t.stats.attributed_ns);
  t.stats.refunded_ns += r;
  t.vtime -= static_cast<double>(r) / weight_of(t.policy);
  if (t.policy.mode == Mode::kCapped)
    t.cap_clock -= static_cast<double>(r) / lease_cap_rate(t.policy, t.busy_scale);
}

void LeaseScheduler::adopt_lease(TenantId id, std::uint64_t expiry_ns, std::uint64_t now) {
  if (!tenants_.contains(id) || holder_ || expiry_ns <= now) return;
  holder_ = id;
  expiry_ns_ = std::min(expiry_ns, now + config_.max_lease_quanta * config_.quantum_ns);
  expiry_cut_ = false;
  // Its threads are running already: charged from now.
  records_.push_back({.tenant = id, .start_ns = now, .begun_ns = now});
  lease_start_ns_ = now;
  cursor_ns_ = std::max(cursor_ns_, now);
  Tenant& t = tenants_.at(id);
  t.stats.grants++;
  t.stats.granted_ns += expiry_ns_ - now;
  last_holder_ = id;
}

void LeaseScheduler::charge(Tenant& t, std::uint64_t from, std::uint64_t to) {
  if (to <= from) return;
  const std::uint64_t d = to - from;
  t.refundable = std::min(t.refundable + d, config_.refund_horizon_ns);
  t.stats.attributed_ns += d;
  t.vtime += static_cast<double>(d) / weight_of(t.policy);
  if (t.policy.mode == Mode::kCapped) {
    t.cap_clock += static_cast<double>(d) / lease_cap_rate(t.policy, t.busy_scale);
  }
  if (!t.history.empty() && t.history.back().second == from) {
    t.history.back().second = to;
  } else {
    t.history.emplace_back(from, to);
  }
}

void LeaseScheduler::set_busy_scale(TenantId id, double scale) {
  auto it = tenants_.find(id);
  if (it == tenants_.end()) return;
  it->second.busy_scale = std::isfinite(scale) ? std::clamp(scale, 1.0, kMaxBusyScale) : 1.0;
}

// GPU time itself (not lease time): at the cap alone.
void LeaseScheduler::charge_unleased(TenantId id, std::uint64_t ns) {
  auto it = tenants_.find(id);
  if (it == tenants_.end() || ns == 0) return;
  Tenant& t = it->second;
  t.stats.attributed_ns += ns;
  t.stats.unleased_ns += ns;
  t.vtime += static_cast<double>(ns) / weight_of(t.policy);
  if (t.policy.mode == Mode::kCapped)
    t.cap_clock += static_cast<double>(ns) / cap_fraction(t.policy);
}

// Where the lease of `r` is charged from: the holder's first launch in it if
// seen within the resume grace, else the grant (nullopt: not known yet).
std::optional<std::uint64_t> LeaseScheduler::lease_begins(const LeaseRecord& r, const Tenant* t,
                                                          std::uint64_t now) const {
  const std::uint64_t grace_end = r.start_ns + config_.resume_grace_ns;
  const std::uint64_t last = r.end_ns != 0 ? std::min(r.end_ns, grace_end) : grace_end;
  const std::uint64_t resumed = t ? t->signals.resumed_ns : 0;
  if (resumed >= r.start_ns && resumed <= last) return resumed;
  // No launch in the grace (or none at all): charged from the grant, as if
  // it had run. Never later: a holder that hides its launches (or a shim
  // that does not publish them) must not run uncharged.
  if (now >= grace_end || r.end_ns != 0) return r.start_ns;
  return std::nullopt;
}

// Moves the attribution cursor forward through the lease records: each
// record owns [max(cursor, first launch), end + overrun]; a record whose
// work is still draining blocks the ones after it until its drain is
// observed.
void LeaseScheduler::attribute(std::uint64_t now) {
  attribute_leases(now);
  for (auto& [id, t] : tenants_) refund(t);
}

void LeaseScheduler::attribute_leases(std::uint64_t now) {
  while (!records_.empty()) {
    LeaseRecord& r = records_.front();
    auto it = tenants_.find(r.tenant);
    Tenant* t = it == tenants_.end() ? nullptr : &it->second;
    cursor_ns_ = std::max(cursor_ns_, r.start_ns);
    if (!r.begun_ns) r.begun_ns = lease_begins(r, t, now);
    if (r.begun_ns && !r.handoff_measured) measure_handoff(r);
    if (r.end_ns == 0) {  // still held: attributed up to now, once it has begun
      if (!r.begun_ns) return;
      cursor_ns_ = std::max(cursor_ns_, *r.begun_ns);
      if (t) charge(*t, cursor_ns_, now);
      cursor_ns_ = std::max(cursor_ns_, now);
      return;
    }
    cursor_ns_ = std::max(cursor_ns_, std::min(*r.begun_ns, r.end_ns));
    if (!r.drained_at_ns && t) {
      const TenantSignals& s = t->signals;
      // A launch that raced an idle release shows up late: its work is
      // this lease's overrun. Until the window has passed, the lease waits.
      if (r.idle_release && s.last_submit_ns > r.submit_mark_ns && s.resumed_ns <= r.end_ns)
        r.submit_mark_ns = s.last_submit_ns;
      const bool settling = r.idle_release && now < r.end_ns + config_.late_submit_ns;
      if (settling) {
        // Charged up to the lease's end below; the overrun, if any, later.
      } else if (s.drained_past(r.submit_mark_ns) || s.last_submit_ns < r.start_ns) {
        // drained_ns is when the shim's queue ran empty (on the GPU's clock)
        // or a submit time: the overrun ends there. A holder that used its
        // lease and whose work all ended before the lease did (it waited at
        // its gate, or stopped) left the GPU idle for the rest: charged up
        // to its drain only. (Not after an idle release: its refund covers
        // that time already.)
        const bool used = r.begun_ns && r.submit_mark_ns >= *r.begun_ns && !r.idle_release &&
                          s.drained_past(r.submit_mark_ns);
        if (used && s.drained_ns < r.end_ns) {
          r.drained_at_ns = std::max(s.drained_ns, *r.begun_ns);
          r.ended_idle = true;
        } else {
          r.drained_at_ns = std::clamp(s.drained_ns, r.end_ns, std::max(now, r.end_ns));
        }
      } else if (now >= r.end_ns + config_.drain_bound_ns) {
        r.drained_at_ns = r.end_ns + config_.drain_bound_ns;
      }
    }
    if (!t) r.drained_at_ns = r.drained_at_ns.value_or(r.end_ns);
    if (!r.drained_at_ns) {
      // Overrun still running: charge the lease itself, the overrun once
      // its end is known (charging it as it goes would overcharge by the
      // time it takes to observe the drain).
      charge(*t, cursor_ns_, r.end_ns);
      cursor_ns_ = std::max(cursor_ns_, r.end_ns);
      return;
    }
    const std::uint64_t done = std::max(*r.drained_at_ns, r.end_ns);
    if (t && r.at_expiry) {
      const std::uint64_t overrun = done - r.end_ns;
      t->overrun_ns = (t->overrun_ns * 3 + overrun) / 4;
    }
    if (t && r.ended_idle && cursor_ns_ > *r.drained_at_ns) {
      // Charged as it ran up to here: the time after its drain goes back.
      const std::uint64_t idle = std::min(cursor_ns_, r.end_ns) - *r.drained_at_ns;
      t->pending_refund = std::min(t->pending_refund + idle, config_.refund_horizon_ns);
      refund(*t);
    }
    if (t) charge(*t, cursor_ns_, done);
    cursor_ns_ = std::max(cursor_ns_, done);
    last_done_ns_ = done;
    last_handed_over_ = r.handed_over;
    const TenantId finished = r.tenant;
    records_.pop_front();
    if (t && t->removed &&
        std::none_of(records_.begin(), records_.end(),
                     [finished](const LeaseRecord& x) { return x.tenant == finished; })) {
      tenants_.erase(finished);
    }
  }
}

void LeaseScheduler::end_lease(std::uint64_t now, bool idle, bool ran_dry) {
  if (!holder_) return;
  const bool handed_over = !idle && !ran_dry && others_want_gpu(now);
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    if (it->tenant == *holder_ && it->end_ns == 0) {
      it->end_ns = std::max(now, it->start_ns);
      it->idle_release = idle;
      it->ran_dry = ran_dry;
      it->handed_over = handed_over;
      it->at_expiry = !idle && !ran_dry && now >= expiry_ns_;
      it->submit_mark_ns = tenants_.at(*holder_).signals.last_submit_ns;
      break;
    }
  }
  last_holder_ = holder_;
  holder_.reset();
  expiry_ns_ = 0;
  expiry_cut_ = false;
}

void LeaseScheduler::grant(TenantId id, std::uint64_t now) {
  Tenant& t = tenants_.at(id);
  if (last_holder_ && *last_holder_ != id) {
    auto prev = tenants_.find(*last_holder_);
    if (prev != tenants_.end()) prev->second.stats.handoffs++;
  }
  if (t.policy.mode == Mode::kCapped) {
    // No banking beyond cap_bank: time spent eligible while another tenant
    // held the GPU is not lost, idle time is.
    t.cap_clock =
        std::max(t.cap_clock, static_cast<double>(now) - static_cast<double>(config_.cap_bank_ns));
  }
  holder_ = id;
  expiry_ns_ = lease_end(id, now);
  expiry_cut_ = expiry_ns_ < now + lease_length_ns();
  if (alone(t, now)) expiry_ns_ = now + lone_lease_ns();
  records_.push_back({.tenant = id, .start_ns = now});
  lease_start_ns_ = now;
  t.stats.grants++;
  t.stats.granted_ns += expiry_ns_ - now;
}

// A quantum from now, or earlier where a tenant away for a short gap is
// expected back and would then preempt the holder (its virtual time a
// margin behind the holder's by then): the holder's queue has drained by
// then, so the tenant's work starts at once.
std::uint64_t LeaseScheduler::lease_end(TenantId holder, std::uint64_t now) const {
  std::uint64_t end = now + lease_length_ns();
  const Tenant& h = tenants_.at(holder);
  const double w = weight_of(h.policy);
  const double margin = static_cast<double>(lease_length_ns()) / w;
  const bool long_kernels =
      h.long_kernels_ns != 0 && now < h.long_kernels_ns + config_.long_kernels_window_ns;
  for (const auto& [id, t] : tenants_) {
    if (id == holder || t.removed || t.was_candidate || t.gap_ns == 0 || t.left_at_ns == 0)
      continue;
    if (now > t.left_at_ns + config_.level_after_ns) continue;  // away longer than a short gap
    const std::uint64_t due = t.left_at_ns + t.gap_ns;
    if (long_kernels && due < now + config_.min_cut_lease_ns &&
        now < std::min(t.left_at_ns + 2 * t.gap_ns, t.left_at_ns + config_.level_after_ns) &&
        !(t.policy.mode == Mode::kCapped && t.cap_clock > static_cast<double>(now)) &&
        t.vtime + margin < h.vtime) {
      // Due back now or a little late, and the holder has run long kernels:
      // a whole lease would let one start just before the return (the GPU
      // runs it to its end). Cut leases keep them waiting
      // (shm::kLeaseCutBit) for as long as hold_for_return would wait, and
      // let its short ones run.
      end = std::min(end, now + config_.min_cut_lease_ns);
      continue;
    }
    if (due < now + config_.min_cut_lease_ns || due >= end) continue;
    if (t.policy.mode == Mode::kCapped && t.cap_clock > static_cast<double>(due)) continue;
    const double holder_then = h.vtime + static_cast<double>(due - now) / w;
    if (t.vtime + margin < holder_then) {
      // The holder's gate lets a launch start until the expiry and the GPU
      // runs it to its end: cut at the return itself, the tenant waited for
      // the holder's last kernel at about every other return.
      const std::uint64_t lead = std::min(cut_lead(h), due - now);
      const std::uint64_t cut = std::max(due - lead, now + config_.min_cut_lease_ns);
      // A lease its gate keeps every launch out of would hold the GPU idle
      // and be charged, turn after turn: such a holder gets a whole lease,
      // as the long kernels of the branch above get one when the returning
      // tenant is late.
      if (fits_cut_lease(h, cut - now, now)) end = cut;
    }
  }
  return end;
}

// The gate starts a launch in a cut lease only if it ends at most
// shm::kCutLeaseOverrunNs past the expiry by the process's per-launch figure
// (gate_decision.hpp, cut_lease_allows). Figures of an allocation's
// processes come in turn: one the daemon saw with short kernels lately
// uses cut leases. The figure is the tenant's to write; a forged one only
// trades its cut leases for whole ones at its own turns, charged as they
// run (in the unit test, the same shares as the honest figure's cut leases).
bool LeaseScheduler::fits_cut_lease(const Tenant& h, std::uint64_t length_ns,
                                    std::uint64_t now) const {
  // Published without the siblings' time slices: a launch shares the GPU
  // with those of the processes that still have work in flight, as the
  // gate weighs it (gate_decision.hpp, cut_per_launch_ns).
  const std::uint64_t per = h.signals.per_launch_ns *
                            std::clamp<std::uint64_t>(h.signals.busy_processes, 1, shm::kMaxSlots);
  if (per == 0 || per <= length_ns + shm::kCutLeaseOverrunNs) return true;
  return h.short_kernels_ns != 0 && now < h.short_kernels_ns + config_.short_kernels_window_ns;
}

// Half a launch of the holder's (its gate's figure, which the tenant writes:
// bounded, so a forged one moves its cut leases and its holds by at most
// min_cut_lease).
std::uint64_t LeaseScheduler::cut_lead(const Tenant& holder) const {
  return std::min(holder.signals.per_launch_ns / 2, config_.min_cut_lease_ns);
}

std::uint64_t LeaseScheduler::hold_for_return(TenantId next, std::uint64_t now) const {
  const Tenant& n = tenants_.at(next);
  const bool short_kernels =
      n.short_kernels_ns != 0 && now < n.short_kernels_ns + config_.short_kernels_window_ns;
  const bool long_kernels = n.overrun_ns >= config_.hold_overrun_ns && !short_kernels;
  const double w = weight_of(n.policy);
  const double margin = static_cast<double>(lease_length_ns()) / w;
  std::uint64_t until = 0;
  for (const auto& [id, t] : tenants_) {
    if (id == next || t.removed || t.was_candidate || t.gap_ns == 0 || t.left_at_ns == 0) continue;
    std::uint64_t away_until =
        std::min(t.left_at_ns + 2 * t.gap_ns, t.left_at_ns + config_.level_after_ns);
    const std::uint64_t due = t.left_at_ns + t.gap_ns;
    if (!long_kernels) {
      // Short kernels: held only for a tenant away for host work that is
      // due back too soon for a cut lease (lease_end: at least min_cut_lease
      // long, ending half a launch of `next`'s before the return) or a
      // little late, for at most return_slack past its return. Granted a
      // lease that cannot end in time, `next` queued work the returning
      // tenant waited for.
      const std::uint64_t lead = cut_lead(n);
      if (t.gap_ns < config_.away_long_ns || due >= now + config_.min_cut_lease_ns + lead) continue;
      away_until = std::min(away_until, due + config_.return_slack_ns);
    }
    if (now >= away_until) continue;  // not back when expected: the GPU goes on
    if (t.policy.mode == Mode::kCapped && t.cap_clock > static_cast<double>(std::max(due, now)))
      continue;
    // As in lease_end(): it would preempt `next` on its return.
    const double next_then = n.vtime + static_cast<double>(due > now ? due - now : 0) / w;
    if (t.vtime + margin < next_then) until = std::max(until, away_until);
  }
  return until;
}

// Whether another tenant waits for the GPU and could be granted it now.
bool LeaseScheduler::contended(const Tenant& t, std::uint64_t now) const {
  return std::any_of(tenants_.begin(), tenants_.end(), [&](const auto& kv) {
    return &kv.second != &t && !kv.second.removed && kv.second.signals.waiting > 0 &&
           (kv.second.policy.mode != Mode::kCapped ||
            kv.second.cap_clock <= static_cast<double>(now));
  });
}

std::optional<std::uint64_t> LeaseScheduler::idle_since(const Tenant& t) const {
  const TenantSignals& s = t.signals;
  if (s.waiting > 0 || !s.drained_past(s.last_submit_ns)) return std::nullopt;
  const std::uint64_t lease_start = records_.empty() ? 0 : records_.back().start_ns;
  return std::max({s.last_submit_ns, s.drained_ns, lease_start});
}

std::uint64_t LeaseScheduler::idle_grace(const Tenant& t, std::uint64_t now) const {
  if (!contended(t, now)) return config_.idle_grace_ns;
  const std::uint64_t grace = std::min(config_.contended_idle_grace_ns, config_.idle_grace_ns);
  return t.gap_ns >= config_.away_long_ns ? std::min(grace, config_.away_idle_grace_ns) : grace;
}

bool LeaseScheduler::holder_idle(const Tenant& t, std::uint64_t now) const {
  const std::optional<std::uint64_t> since = idle_since(t);
  return since && now >= *since + idle_grace(t, now);
}

// When the holder counts as starved (starved_grace_ns) unless it renews its
// estimate or submits first; nullopt: it cannot starve now. Only once it has
// submitted under this lease: before that its waiting thread has not woken
// for the grant yet, which is hand-off cost, not starvation. Not while several
// of its processes have work in flight: each publishes its own estimate, the
// latest is not the allocation's. (Only the current or last holder can have
// submitted since the last grant.)
std::optional<std::uint64_t> LeaseScheduler::starved_deadline(const Tenant& t) const {
  const TenantSignals& s = t.signals;
  if (s.waiting == 0 || s.busy_processes > 1 || s.expected_drain_ns == 0 || lease_start_ns_ == 0 ||
      s.last_submit_ns < lease_start_ns_) {
    return std::nullopt;
  }
  const std::uint64_t ran_dry = s.drained_past(s.last_submit_ns)
                                    ? std::max(s.drained_ns, s.last_submit_ns)
                                    : std::max(s.expected_drain_ns, s.last_submit_ns);
  // Saturating: a forged estimate near the top of the range must not wrap.
  if (ran_dry > UINT64_MAX - config_.starved_grace_ns) return std::nullopt;
  return ran_dry + config_.starved_grace_ns;
}

bool LeaseScheduler::holder_starved(const Tenant& t, std::uint64_t now) const {
  const auto deadline = starved_deadline(t);
  return deadline && now >= *deadline && contended(t, now);
}

// Whether the tenant would use the GPU if it held the lease now.
bool LeaseScheduler::wants_gpu(TenantId id, const Tenant& t, std::uint64_t now) const {
  if (t.removed) return false;
  if (t.signals.waiting > 0) return true;
  return holder_ == id && !holder_idle(t, now);
}

std::optional<TenantId> LeaseScheduler::choose(std::uint64_t now) {
  // A holder just given back starved goes after the others: granted again at
  // once, its threads still off the CPU would hold an idle GPU for a whole
  // lease. Alone, or with nobody else close enough in virtual time, it is
  // granted again (it renews or submits when it runs).
  if (auto other = choose(now, true)) return other;
  return choose(now, false);
}

bool LeaseScheduler::starved_now(const Tenant& t, std::uint64_t now) const {
  const auto starved = starved_deadline(t);
  return starved && now >= *starved;
}

std::optional<TenantId> LeaseScheduler::choose(std::uint64_t now, bool skip_starved) const {
  // Passing over a starved tenant keeps the GPU busy, but is no licence: the
  // one chosen instead may be at most starved_lead_leases leases of its own
  // ahead of it in virtual time (SchedulerConfig).
  double starved_floor = std::numeric_limits<double>::max();
  if (skip_starved) {
    for (const auto& [id, t] : tenants_) {
      if (wants_gpu(id, t, now) && starved_now(t, now))
        starved_floor = std::min(starved_floor, t.vtime);
    }
  }
  const double lease = static_cast<double>(lease_length_ns());
  std::optional<TenantId> best;
  double best_vtime = 0;
  for (const auto& [id, t] : tenants_) {
    if (!wants_gpu(id, t, now)) continue;
    if (skip_starved) {
      if (starved_now(t, now)) continue;
      const double lead = static_cast<double>(config_.starved_lead_leases) * lease;
      if (t.vtime > starved_floor + lead / weight_of(t.policy)) continue;
    }
    if (t.policy.mode == Mode::kCapped && t.cap_clock > static_cast<double>(now)) continue;
    const double v = t.vtime;
    // Ties keep the current holder (no hand-off), then the lowest id.
    if (!best || v < best_vtime || (v == best_vtime && holder_ == id)) {
      best = id;
      best_vtime = v;
    }
  }
  return best;
}

bool LeaseScheduler::still_first_at_expiry(std::uint64_t now) const {
  const Tenant& h = tenants_.at(*holder_);
  if (h.policy.mode == Mode::kCapped && h.cap_clock > static_cast<double>(now)) return false;
  const double holder_at_expiry =
      h.vtime + static_cast<double>(expiry_ns_ - now) / weight_of(h.policy);
  for (const auto& [id, t] : tenants_) {
    if (id == *holder_ || !wants_gpu(id, t, now)) continue;
    if (t.policy.mode == Mode::kCapped && t.cap_clock > static_cast<double>(expiry_ns_)) continue;
    if (t.vtime < holder_at_expiry) return false;
  }
  return true;
}

std::uint64_t LeaseScheduler::lone_lease_ns() const {
  return std::max(config_.lone_lease_quanta * config_.quantum_ns, lease_length_ns());
}

bool LeaseScheduler::others_want_gpu(std::uint64_t now) const {
  return std::any_of(tenants_.begin(), tenants_.end(), [&](const auto& kv) {
    return kv.first != *holder_ && wants_gpu(kv.first, kv.second, now);
  });
}

bool LeaseScheduler::others_away_briefly(std::uint64_t now) const {
  return std::any_of(tenants_.begin(), tenants_.end(), [&](const auto& kv) {
    const Tenant& t = kv.second;
    // was_candidate: it wanted the GPU when this step began (a holder that
    // gave its lease back in it has no left_at_ns yet).
    return kv.first != *holder_ && !t.removed &&
           (t.was_candidate || (t.left_at_ns != 0 && now <= t.left_at_ns + config_.level_after_ns));
  });
}

// Alone only when nobody else is between two spells of work either: a
// tenant due back from a short gap finds the GPU free at its return
// (lease_end), which a long lease would undo.
bool LeaseScheduler::alone(const Tenant& h, std::uint64_t now) const {
  return config_.lone_lease_quanta > 1 && h.policy.mode == Mode::kBurst && !others_want_gpu(now) &&
         !others_away_briefly(now);
}

void LeaseScheduler::extend_or_cut(Tenant& h, std::uint64_t now) {
  if (alone(h, now)) {
    // Alone: keep the lease lone_lease_quanta ahead, moved at most once a
    // quantum (each move is a write to the limits region).
    const std::uint64_t target = now + lone_lease_ns();
    if (expiry_ns_ + config_.quantum_ns <= target) {
      h.stats.granted_ns += target - expiry_ns_;
      expiry_ns_ = target;
    }
    return;
  }
  const bool others = others_want_gpu(now);
  if (others && expiry_ns_ > now + lease_length_ns()) {
    // A lone lease, and now another tenant wants the GPU.
    const std::uint64_t cut = now + config_.extend_margin_ns;
    h.stats.granted_ns -= std::min(h.stats.granted_ns, expiry_ns_ - cut);
    expiry_ns_ = cut;
  }
  if (expiry_ns_ > now + config_.extend_margin_ns) return;
  // Would the holder still be the least-served at its expiry? Then extend
  // in place: a tenant the others do not need keeps the GPU without any
  // hand-off. Otherwise it runs to its expiry; the next step hands over.
  if (!still_first_at_expiry(now)) return;
  const std::uint64_t extended = lease_end(*holder_, now);
  if (extended > expiry_ns_) {
    h.stats.granted_ns += extended - expiry_ns_;
    expiry_ns_ = extended;
    expiry_cut_ = extended < now + lease_length_ns();
  }
}

bool LeaseScheduler::preempted(std::uint64_t now) const {
  const std::uint64_t start = records_.empty() ? now : records_.back().start_ns;
  if (now < start + config_.preempt_after_ns) return false;
  const Tenant& h = tenants_.at(*holder_);
  const double margin = static_cast<double>(lease_length_ns()) / weight_of(h.policy);
  for (const auto& [id, t] : tenants_) {
    if (id == *holder_ || t.removed || t.signals.waiting == 0) continue;
    if (t.policy.mode == Mode::kCapped && t.cap_clock > static_cast<double>(now)) continue;
    if (t.vtime + margin < h.vtime) return true;
  }
  return false;
}

// Time until which the grant to `next` waits for the former holder's queued
// work (0: grant now).
std::uint64_t LeaseScheduler::handoff_deferral(TenantId next, std::uint64_t now) const {
  // Any former holder (not only the last one: a tenant re-granted while its
  // earlier work still ran has several leases in the records) whose work is
  // still running: grant when its drain is seen (within the drain bound),
  // not on an estimate. Overlapping its queue with the next holder's work
  // would make the two share the GPU for a while, and that time could not be
  // attributed exactly. Until then poll quickly: the GPU is busy with the
  // old work, the wait costs only the observation latency.
  std::uint64_t defer = 0;
  for (const LeaseRecord& r : records_) {
    if (r.tenant == next || r.end_ns == 0 || r.drained_at_ns) continue;
    if (now >= r.end_ns + config_.drain_bound_ns) continue;
    auto it = tenants_.find(r.tenant);
    if (it == tenants_.end() || it->second.removed) continue;
    const TenantSignals& s = it->second.signals;
    if (s.drained_past(s.last_submit_ns) || s.drained_past(r.submit_mark_ns)) continue;
    // Given back starved: its work ended by its estimate, and its poller, as
    // starved as its launching thread, may publish the drain only much later.
    if (r.ran_dry && s.last_submit_ns <= r.submit_mark_ns) continue;
    const std::uint64_t expected = std::min(s.expected_drain_ns, r.end_ns + config_.drain_bound_ns);
    const std::uint64_t until = expected > now + config_.handoff_lead_ns
                                    ? expected - config_.handoff_lead_ns
                                    : now + config_.drain_poll_ns;
    defer = std::max(defer, until);
  }
  return defer;
}

LeaseDecision LeaseScheduler::step(std::uint64_t now) {
  LeaseDecision d;
  if (first_step_ns_ == 0) first_step_ns_ = now;
  // Compared with what the last step published, so leases ended between
  // steps (remove_tenant) are reported as revoked too.
  const std::optional<TenantId> before = published_holder_;
  const std::uint64_t expiry_before = published_expiry_ns_;

  // Tenants returning from idle catch up with the least-served busy one, so
  // idling never banks credit.
  double min_busy = std::numeric_limits<double>::max();
  for (const auto& [id, t] : tenants_) {
    if (t.was_candidate && !t.removed) min_busy = std::min(min_busy, t.vtime);
  }
  for (auto& [id, t] : tenants_) {
    const bool wants = wants_gpu(id, t, now);
    if (wants && !t.was_candidate && t.left_at_ns != 0) {
      const std::uint64_t gap = now - t.left_at_ns;
      if (gap <= config_.level_after_ns) t.gap_ns = t.gap_ns ? (t.gap_ns * 3 + gap) / 4 : gap;
    } else if (!wants && t.was_candidate) {
      t.left_at_ns = now;
      const std::uint64_t spell = t.back_at_ns ? now - t.back_at_ns : 0;
      if (spell != 0 && spell <= config_.level_after_ns)
        t.spell_ns = t.spell_ns ? (t.spell_ns * 3 + spell) / 4 : spell;
    }
    if (wants && !t.was_candidate) t.back_at_ns = now;
    if (t.signals.per_launch_ns != 0 && t.signals.per_launch_ns <= config_.short_kernel_ns)
      t.short_kernels_ns = now;
    if (t.signals.per_launch_ns >= config_.hold_overrun_ns ||
        t.overrun_ns >= config_.hold_overrun_ns)
      t.long_kernels_ns = now;
    if (wants) {
      const bool was_idle =
          t.last_demand_ns == 0 || now > t.last_demand_ns + config_.level_after_ns;
      if (!t.was_candidate && was_idle && min_busy != std::numeric_limits<double>::max()) {
        t.vtime = std::max(t.vtime, min_busy);
      }
      t.last_demand_ns = now;
    }
    t.was_candidate = wants;
  }

  attribute(now);

  if (holder_) {
    Tenant& h = tenants_.at(*holder_);
    const bool starved = !h.removed && holder_starved(h, now);
    if (!h.removed && (starved || holder_idle(h, now))) {
      // Given back for idleness: the idle grace it waited out was charged
      // as the lease ran, and was not use. (A gap its gate measures later
      // begins before its next lease, and only its part inside that lease
      // is reported, so nothing is refunded twice.) A starved holder's work
      // ran until its estimated drain.
      const TenantSignals& sig = h.signals;
      const std::uint64_t last =
          std::max({sig.last_submit_ns, sig.drained_ns, starved ? sig.expected_drain_ns : 0,
                    records_.empty() ? 0 : records_.back().start_ns});
      if (now > last) {
        const std::uint64_t before = h.stats.refunded_ns;
        h.pending_refund = std::min(h.pending_refund + (now - last), config_.refund_horizon_ns);
        refund(h);
        h.release_refund = {
            .amount = h.stats.refunded_ns - before, .idle_since = last, .released_at = now};
      }
      end_lease(now, true, starved);
    } else if (h.removed || now >= expiry_ns_ || preempted(now)) {
      end_lease(now);
    } else if (!expiry_cut_) {
      // (A lease cut short for a returning tenant runs out instead: if the
      // tenant is late, the next grant goes back to the holder.)
      extend_or_cut(h, now);
    }
  }
  std::uint64_t deferred_until = 0;
  std::optional<TenantId> deferred;
  if (!holder_) {
    if (auto next = choose(now)) {
      deferred_until = hold_for_return(*next, now);
      if (deferred_until == 0) deferred_until = handoff_deferral(*next, now);
      if (deferred_until == 0)
        grant(*next, now);
      else
        deferred = next;
    }
  }

  refresh_shares(now);

  d.holder = holder_;
  d.expiry_ns = expiry_ns_;
  d.cut = holder_.has_value() && expiry_cut_;
  d.changed = holder_ != before || expiry_ns_ != expiry_before || d.cut != published_cut_;
  if (before && before != holder_) d.revoked = before;
  d.next_step_ns = next_deadline(now);
  if (deferred_until != 0) d.next_step_ns = std::min(d.next_step_ns, deferred_until);
  if (const auto r = ready(deferred, now)) {
    d.ready = r->id;
    d.ready_until_ns = r->until_ns;
  }
  published_holder_ = holder_;
  published_expiry_ns_ = expiry_ns_;
  published_cut_ = d.cut;
  return d;
}

// When the holder is expected to hand the GPU on: where it goes away for
// host work between spells, when its usual spell ends; at its expiry
// otherwise; earlier where a waiting tenant will preempt it. With
// `signals`, also what its own words say: at its expected drain once it has
// stopped launching (no thread at its gate, nothing submitted for
// stopped_submitting_ns: it syncs before its host work), at the end of its
// grace once its drain is seen. Those are the tenant's word, so the daemon
// never steps by them (next_deadline), and a wrong one only names the next
// tenant early (its threads then spin at most kMaxReadySpinNs per wait).
std::uint64_t LeaseScheduler::handoff_expected(std::uint64_t now, bool signals) const {
  const Tenant& h = tenants_.at(*holder_);
  std::uint64_t at = expiry_ns_;
  if (h.gap_ns >= config_.away_long_ns) {
    if (h.spell_ns != 0 && h.back_at_ns != 0) at = std::min(at, h.back_at_ns + h.spell_ns);
    const TenantSignals& s = h.signals;
    if (!signals) {
    } else if (const auto since = idle_since(h)) {
      at = std::min(at, saturating_add(*since, idle_grace(h, now)));
    } else if (s.waiting == 0 && s.expected_drain_ns != 0 &&
               now >= saturating_add(s.last_submit_ns, config_.stopped_submitting_ns)) {
      at = std::min(at, saturating_add(s.expected_drain_ns, config_.away_idle_grace_ns));
    }
  }
  const std::uint64_t start = records_.empty() ? now : records_.back().start_ns;
  const double margin = static_cast<double>(lease_length_ns()) / weight_of(h.policy);
  for (const auto& [id, t] : tenants_) {
    if (id == *holder_ || t.removed || t.signals.waiting == 0) continue;
    if (t.policy.mode == Mode::kCapped && t.cap_clock > static_cast<double>(now)) continue;
    if (t.vtime + margin < h.vtime)
      at = std::min(at, std::max(now, start + config_.preempt_after_ns));
  }
  return std::max(at, now);
}

// Who the next grant most likely goes to and until when its waiting threads
// should stay on the CPU, once the hand-off is expected soon: a grant
// deferred for a drain or a return is due now; a holder going away for host
// work hands off at its drain and the end of its grace, any other at its
// expiry, or earlier where a waiting tenant will preempt it. The tenant is
// the one choose() would pick then, a tenant due back from a short gap by
// then included. Only a guess: a wrong one costs its threads a spin of at
// most the window.
std::optional<LeaseScheduler::Ready> LeaseScheduler::ready(std::optional<TenantId> deferred,
                                                           std::uint64_t now) const {
  const std::uint64_t at = holder_ ? handoff_expected(now, true) : now;
  // A lease longer than ready_max_lease: the hand-off's wake-up is a small
  // part of it, and a thread spinning beside the holder's can cost it more.
  const std::uint64_t start = records_.empty() ? now : records_.back().start_ns;
  if (holder_ && at > start + config_.ready_max_lease_ns) return std::nullopt;
  const bool soon = at <= now + config_.ready_ahead_ns;
  const Tenant* h = holder_ ? &tenants_.at(*holder_) : nullptr;
  const double margin = h ? static_cast<double>(lease_length_ns()) / weight_of(h->policy) : 0;
  std::optional<Ready> best;
  double best_vtime = 0;
  for (const auto& [id, t] : tenants_) {
    if (t.removed || (holder_ && id == *holder_)) continue;
    std::uint64_t from = at, until = at + config_.ready_slack_ns;
    if (t.signals.waiting > 0) {
      if (!soon || (deferred && id != *deferred)) continue;
    } else {
      // Away between two spells of work and due back soon: its thread
      // arrives at the gate by itself, and finds the word there for as long
      // as the daemon looks for its return (a late one included), if the
      // GPU is to be handed on by then or it will preempt the holder.
      if (t.was_candidate || t.left_at_ns == 0 || t.gap_ns == 0 ||
          now > t.left_at_ns + config_.level_after_ns)
        continue;
      const std::uint64_t due = t.left_at_ns + t.gap_ns;
      if (due > now + config_.ready_ahead_ns || now >= due + config_.away_long_ns) continue;
      if (!soon && !(h && t.vtime + margin < h->vtime)) continue;
      from = std::max(due, now);
      until = std::max(until, from + config_.away_long_ns);
    }
    if (t.policy.mode == Mode::kCapped && t.cap_clock > static_cast<double>(from)) continue;
    if (!best || t.vtime < best_vtime) {
      best = Ready{.id = id, .until_ns = until};
      best_vtime = t.vtime;
    }
  }
  return best;
}

std::uint64_t LeaseScheduler::next_deadline(std::uint64_t now) const {
  std::uint64_t next = now + config_.quantum_ns;
  if (holder_) {
    // The extension is looked at once when the margin begins; a holder not
    // extended then is looked at again on the daemon's demand polls and at
    // expiry. Asking for a step at `now` for the whole margin made the
    // daemon spin through the last 5 ms of every lease that was not
    // extended (a capped holder, any holder with a tenant waiting).
    if (!expiry_cut_ && expiry_ns_ > now + config_.extend_margin_ns) {
      next = std::min(next, expiry_ns_ - config_.extend_margin_ns);
    }
    next = std::min(next, std::max(now, expiry_ns_));
    const Tenant& h = tenants_.at(*holder_);
    if (const auto starved = starved_deadline(h); starved && *starved > now)
      next = std::min(next, *starved);
    // The next holder is told in time to be on a CPU (ready()).
    // (Only by the daemon's own figures, never more often than drain_poll.)
    if (const std::uint64_t at = handoff_expected(now, false); at > now + config_.ready_ahead_ns)
      next = std::min(next, std::max(at - config_.ready_ahead_ns, now + config_.drain_poll_ns));
    if (h.gap_ns >= config_.away_long_ns && contended(h, now)) {
      // A holder that goes away for a while once drained: its lease goes
      // back at the end of its grace, and its drain is looked for from
      // when it expects it (for at most away_long_ns).
      if (const auto since = idle_since(h)) {
        next = std::min(next, std::max(now, *since + idle_grace(h, now)));
      } else if (const std::uint64_t drain = h.signals.expected_drain_ns;
                 h.signals.waiting == 0 && drain != 0 && now < drain + config_.away_long_ns) {
        next = std::min(next, std::max(drain, now + config_.drain_poll_ns));
      }
    }
  }
  for (const auto& [id, t] : tenants_) {
    // A tenant away for host work between steps (away_long_ns or more, as
    // a rule) is looked for from when it is expected back, so its return
    // does not wait for the next demand poll.
    if (holder_ != id && !t.removed && !t.was_candidate && t.left_at_ns != 0 &&
        t.gap_ns >= config_.away_long_ns) {
      // From a quarter of its gap before: a return seen only from `due` on
      // would never shorten the gap it is expected by, only lengthen it.
      const std::uint64_t from = t.left_at_ns + t.gap_ns - t.gap_ns / 4;
      if (now < from) {
        next = std::min(next, from);
      } else if (now < t.left_at_ns + t.gap_ns + config_.away_long_ns) {
        next = std::min(next, now + config_.drain_poll_ns);
      }
    }
    if (t.policy.mode == Mode::kCapped && t.signals.waiting > 0 &&
        t.cap_clock > static_cast<double>(now)) {
      next = std::min(next, static_cast<std::uint64_t>(t.cap_clock) + 1);
    }
  }
  return std::max(next, now);
}

void LeaseScheduler::refresh_shares(std::uint64_t now) {
  if (now < last_share_refresh_ns_ + config_.quantum_ns && last_share_refresh_ns_ != 0) return;
  last_share_refresh_ns_ = now;
  std::vector<TenantId> active;
  std::vector<TenantPolicy> policies;
  for (auto& [id, t] : tenants_) {
    t.stats.holder = holder_ == id;
    if (!t.removed && t.last_demand_ns != 0 && now < t.last_demand_ns + config_.active_window_ns) {
      active.push_back(id);
      policies.push_back(t.policy);
    } else {
      t.stats.target_ppm = 0;
    }
    // Achieved: attributed time inside the window, partial intervals clipped.
    const std::uint64_t window_start = std::max(
        first_step_ns_, now > config_.achieved_window_ns ? now - config_.achieved_window_ns : 0);
    while (!t.history.empty() && t.history.front().second <= window_start) t.history.pop_front();
    std::uint64_t in_window = 0;
    for (const auto& [a, b] : t.history) in_window += std::min(b, now) - std::max(a, window_start);
    const std::uint64_t span = std::max<std::uint64_t>(now - window_start, 1);
    t.stats.achieved_ppm = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(in_window * 1'000'000 / span, 1'000'000));
  }
  const auto targets = entitlements_ppm(policies);
  for (std::size_t i = 0; i < active.size(); ++i)
    tenants_.at(active[i]).stats.target_ppm = targets[i];
}

TenantStats LeaseScheduler::stats(TenantId id) const {
  auto it = tenants_.find(id);
  if (it == tenants_.end()) return {};
  TenantStats s = it->second.stats;
  s.holder = holder_ == id;
  return s;
}

}  // namespace cushare::sched
