// The daemon's backstop: what the device itself says (NVML per-process memory
// and utilisation) judged against the quota and the leases. A tenant's native
// code can always reach the real driver past the shim, and a tenant writes its
// own usage region; neither changes what NVML reports. Pure policy, clock
// injected; the daemon feeds it and carries out what it decides.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "scheduler/lease_scheduler.hpp"

namespace cushare::sched {

enum class OverQuotaAction { kKill, kLog };

std::optional<OverQuotaAction> parse_over_quota_action(std::string_view text);
const char* to_string(OverQuotaAction action);

// Memory of one allocation entry: above its quota by ground truth for longer
// than the grace calls for action. After an action the next one waits a whole
// grace again (NVML needs a moment to see the memory of a killed process go).
class MemoryWatch {
 public:
  explicit MemoryWatch(std::uint64_t grace_ns) : grace_ns_(grace_ns) {}
  // True when action is due now.
  bool observe(std::uint64_t used, std::uint64_t limit, std::uint64_t now);
  bool over() const { return since_.has_value(); }

 private:
  std::uint64_t grace_ns_;
  std::optional<std::uint64_t> since_;
};

// GPU time of one tenant: ground truth against what the scheduler charged.
// Leases are charged as wall time, so an honest tenant's charge is at least
// what it used; what ground truth shows beyond the charge was taken without a
// lease (work after a forged drain mark, launches past the shim).
class BusyBalance {
 public:
  struct Verdict {
    std::uint64_t charge_ns = 0;  // to charge on top (LeaseScheduler::charge_unleased)
    bool unleased = false;        // running without leases for kUnleasedWindows windows
  };
  // A charge that ran ahead of ground truth (attribution lags the work by up
  // to the drain bound, NVML samples are coarse) offsets later usage up to
  // this much; more is not banked.
  static constexpr std::uint64_t kBankNs = 100'000'000;
  // A window counts as unleased when ground truth exceeds the charge by more
  // than max(kUnleasedFloorNs, window / 4); action takes that many in a row.
  static constexpr std::uint64_t kUnleasedFloorNs = 100'000'000;
  static constexpr int kUnleasedWindows = 3;

  // `truth_ns`: the tenant's processes' GPU time in the window by NVML;
  // `charged_ns`: what the scheduler attributed to it over the same window,
  // net of refunds (negative where refunds took back more than it charged).
  // `scale`: the lease time per ns of GPU time its cap was held to in the
  // window (LeaseBusyRatio; 1 where none was). The balance weighs the charge
  // at that scale: idle lease time the scale already made up for is not
  // banked a second time, and GPU time the scale let through beyond the cap
  // (a tenant whose idle stopped) is charged on top. The unleased check
  // weighs the whole charge: an honest tenant at the scale's bound is never
  // flagged for it.
  Verdict observe(std::uint64_t truth_ns, std::int64_t charged_ns, std::uint64_t window_ns,
                  double scale = 1);

 private:
  std::int64_t balance_ = 0;  // truth minus charge, carried; >= -kBankNs
  int unleased_windows_ = 0;
};

// The other side of the balance: how much lease time a tenant is charged
// per ns of GPU time ground truth shows it using. Leases are charged as wall
// time, and idle stretches inside them that the refunds miss (a lease held
// through the tenant's host work on a loaded host) make a capped tenant
// reach its cap in charges while it runs below it. Its cap is applied to the
// charge divided by this scale (LeaseScheduler::set_busy_scale), so that it
// holds for measured GPU time, within kMaxScale: a tenant that holds its
// leases idle on purpose gains no GPU time by it, and holds at most
// kMaxScale times its cap in leases.
class LeaseBusyRatio {
 public:
  static constexpr double kMaxScale = kMaxBusyScale;
  // Each window's weight in the running figures.
  static constexpr double kWindowWeight = 0.5;
  // Windows charged less than this share of their length say little.
  static constexpr double kMinChargedShare = 0.02;
  // The first windows with figures are left out: they cover the tenant's
  // start under this daemon (a restarted daemon charges its first leases
  // while the processes still wake from their local duty cycle). With NVML
  // samples that tile time, one read 1.25 at a weight of a half, and a cap
  // of 30 ran at 35 % for a second until the backstop charged it back.
  static constexpr unsigned kSettlingWindows = 1;

  // As BusyBalance::observe. A window without GPU time by NVML is left out:
  // the tenant's processes may be ones NVML does not show (not attributed).
  void observe(std::uint64_t truth_ns, std::int64_t charged_ns, std::uint64_t window_ns);
  // Charged lease time per ns of GPU time, in [1, kMaxScale].
  double scale() const { return scale_; }

 private:
  double charged_ = 0, truth_ = 0;  // running (exponentially weighted) figures
  double scale_ = 1;
  unsigned settling_ = kSettlingWindows;
};

// The scheduler's cumulative charge of a tenant (net of refunds) at one
// sample, and which time the tenant had joined the scheduler then
// (TenantStats::incarnation).
struct ChargeMark {
  std::uint64_t incarnation = 0;
  std::uint64_t attributed_ns = 0;
};

// What the scheduler charged between two marks: all of `now` if the tenant
// left and came back since (its counters restarted), else the difference,
// which refunds can make negative. Taken as a comeback, such a window read
// as the whole total charged and hid its excess from the backstop; taken as
// 0, the refund would offset no window's usage.
std::int64_t charged_between(ChargeMark then, ChargeMark now);

// The GPU time a restarted daemon takes up from the usage region (where the
// last one published it, and where the allocation's processes can write
// too), held to what the daemon-owned counters in `limits` allow: lease time
// granted, each lease's overrun up to the drain bound, and ground truth's
// charges on top. A forged figure can then move the count only within that.
struct CarriedCounters {
  std::uint64_t granted_ns = 0;
  std::uint64_t grants = 0;
  std::uint64_t unleased_ns = 0;
};
std::uint64_t carried_busy_ns(std::uint64_t usage_busy_ns, const CarriedCounters& owned,
                              std::uint64_t drain_bound_ns);

// One process an action may fall on.
struct ProcessUse {
  std::uint32_t host_pid = 0;
  std::uint64_t start_time = 0;  // clock ticks after boot
  std::uint64_t amount = 0;      // bytes or busy ns on the GPUs concerned
};

// The youngest process that uses any of it (the last one started is the one
// that pushed the allocation over), or nullopt.
std::optional<ProcessUse> youngest_user(std::span<const ProcessUse> processes);

}  // namespace cushare::sched
