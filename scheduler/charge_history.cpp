#include "scheduler/charge_history.hpp"

namespace cushare::sched {

void ChargeHistory::record(std::uint64_t now, ChargeMark mark) {
  // The newest point is replaced while it is within the spacing of the one
  // before it (or at its very moment), so that the marks before it stay at
  // least kSpacingNs apart and the newest is always current.
  if ((size_ >= 2 && now < nth(size_ - 2).at + kSpacingNs) ||
      (size_ >= 1 && now <= nth(size_ - 1).at)) {
    ring_[(first_ + size_ - 1) % kCapacity] = {now, mark};
    return;
  }
  if (size_ == kCapacity) {
    first_ = (first_ + 1) % kCapacity;
    --size_;
  }
  ring_[(first_ + size_) % kCapacity] = {now, mark};
  ++size_;
}

ChargeMark ChargeHistory::at(std::uint64_t t) const {
  if (t <= nth(0).at) return nth(0).mark;
  if (t >= nth(size_ - 1).at) return nth(size_ - 1).mark;
  // The last point at or before t (binary search over the ring's order).
  std::size_t lo = 0, hi = size_ - 1;
  while (hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    (nth(mid).at <= t ? lo : hi) = mid;
  }
  const Point& a = nth(lo);
  const Point& b = nth(hi);
  const double share = static_cast<double>(t - a.at) / static_cast<double>(b.at - a.at);
  if (a.mark.incarnation != b.mark.incarnation) {
    return {.incarnation = b.mark.incarnation,
            .attributed_ns =
                static_cast<std::uint64_t>(share * static_cast<double>(b.mark.attributed_ns))};
  }
  // Refunds can take the count back: the step is signed.
  const auto step = static_cast<std::int64_t>(b.mark.attributed_ns - a.mark.attributed_ns);
  return {.incarnation = a.mark.incarnation,
          .attributed_ns = a.mark.attributed_ns +
                           static_cast<std::uint64_t>(
                               static_cast<std::int64_t>(share * static_cast<double>(step)))};
}

std::int64_t ChargeHistory::charged(std::uint64_t from, std::uint64_t to) const {
  if (size_ == 0 || to <= from) return 0;
  return charged_between(at(from), at(to));
}

std::optional<Stretch> judged_stretch(const std::map<std::string, Stretch>& by_gpu,
                                      const std::string& gpu_key, const ChargeHistory& charges) {
  auto it = by_gpu.find(gpu_key);
  if (it == by_gpu.end()) it = by_gpu.begin();
  if (it == by_gpu.end()) return std::nullopt;
  const Stretch s = it->second;
  if (s.to_ns <= s.from_ns || (!charges.empty() && !charges.covers(s.from_ns))) return std::nullopt;
  return s;
}

}  // namespace cushare::sched
