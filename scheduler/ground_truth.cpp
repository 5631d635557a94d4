#include "scheduler/ground_truth.hpp"

#include <algorithm>
#include <cmath>

namespace cushare::sched {

std::optional<OverQuotaAction> parse_over_quota_action(std::string_view text) {
  if (text == "kill") return OverQuotaAction::kKill;
  if (text == "log") return OverQuotaAction::kLog;
  return std::nullopt;
}

const char* to_string(OverQuotaAction action) {
  return action == OverQuotaAction::kKill ? "kill" : "log";
}

bool MemoryWatch::observe(std::uint64_t used, std::uint64_t limit, std::uint64_t now) {
  if (used <= limit) {
    since_.reset();
    return false;
  }
  if (!since_) since_ = now;
  if (now - *since_ < grace_ns_) return false;
  since_ = now;
  return true;
}

BusyBalance::Verdict BusyBalance::observe(std::uint64_t truth_ns, std::int64_t charged_ns,
                                          std::uint64_t window_ns, double scale) {
  Verdict v;
  const auto excess = static_cast<std::int64_t>(truth_ns) - charged_ns;
  const double weight = std::isfinite(scale) ? std::clamp(scale, 1.0, kMaxBusyScale) : 1.0;
  const auto gpu_charge = static_cast<std::int64_t>(static_cast<double>(charged_ns) / weight);
  balance_ = std::max<std::int64_t>(balance_ + static_cast<std::int64_t>(truth_ns) - gpu_charge,
                                    -static_cast<std::int64_t>(kBankNs));
  if (balance_ > 0) {
    v.charge_ns = static_cast<std::uint64_t>(balance_);
    balance_ = 0;
  }
  const std::uint64_t margin = std::max(kUnleasedFloorNs, window_ns / 4);
  const bool unleased_window = excess > 0 && static_cast<std::uint64_t>(excess) > margin;
  unleased_windows_ = unleased_window ? unleased_windows_ + 1 : 0;
  if (unleased_windows_ >= kUnleasedWindows) {
    v.unleased = true;
    unleased_windows_ = 0;
  }
  return v;
}

void LeaseBusyRatio::observe(std::uint64_t truth_ns, std::int64_t charged_ns,
                             std::uint64_t window_ns) {
  if (truth_ns == 0 || charged_ns <= 0 || window_ns == 0) return;
  const double charged = static_cast<double>(charged_ns);
  if (charged < kMinChargedShare * static_cast<double>(window_ns)) return;
  if (settling_ > 0) {
    --settling_;
    return;
  }
  const double truth = static_cast<double>(truth_ns);
  const bool first = truth_ == 0;
  charged_ = first ? charged : (1 - kWindowWeight) * charged_ + kWindowWeight * charged;
  truth_ = first ? truth : (1 - kWindowWeight) * truth_ + kWindowWeight * truth;
  scale_ = std::clamp(charged_ / truth_, 1.0, kMaxScale);
}

std::int64_t charged_between(ChargeMark then, ChargeMark now) {
  if (now.incarnation != then.incarnation) return static_cast<std::int64_t>(now.attributed_ns);
  return static_cast<std::int64_t>(now.attributed_ns - then.attributed_ns);  // modular: signed
}

std::uint64_t carried_busy_ns(std::uint64_t usage_busy_ns, const CarriedCounters& owned,
                              std::uint64_t drain_bound_ns) {
  // Saturating: the counters are the daemon's own, but years of them summed
  // must not wrap into a small bound.
  auto add = [](std::uint64_t a, std::uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
  };
  const std::uint64_t overruns = owned.grants != 0 && drain_bound_ns > UINT64_MAX / owned.grants
                                     ? UINT64_MAX
                                     : owned.grants * drain_bound_ns;
  return std::min(usage_busy_ns, add(add(owned.granted_ns, owned.unleased_ns), overruns));
}

std::optional<ProcessUse> youngest_user(std::span<const ProcessUse> processes) {
  const ProcessUse* best = nullptr;
  for (const auto& p : processes) {
    if (p.amount == 0) continue;
    if (!best || p.start_time > best->start_time ||
        (p.start_time == best->start_time && p.host_pid > best->host_pid))
      best = &p;
  }
  return best ? std::optional<ProcessUse>(*best) : std::nullopt;
}

}  // namespace cushare::sched
