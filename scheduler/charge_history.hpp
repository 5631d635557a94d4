// The scheduler's cumulative charge of one tenant over the last few
// seconds, so that it can be read at any moment in between. Ground truth
// (NVML) stands for a stretch that ends at its latest sample, a sampling
// period or so before it is read, and its stretches are whole periods: a
// charge taken from one reading's moment to the next would be compared with
// 4 periods of GPU time in one window and 6 in the next. Reading the charge
// over the very stretch the samples cover keeps the two in step. Pure.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "scheduler/ground_truth.hpp"

namespace cushare::sched {

class ChargeHistory {
 public:
  // The marks before the newest are at least this far apart (a later one
  // within it replaces the newest), and this many are kept: about five
  // seconds, more than an NVML reading reaches back while NVML answers.
  static constexpr std::uint64_t kSpacingNs = 20'000'000;
  static constexpr std::size_t kCapacity = 256;

  // The charge at `now` (monotonic ns, non-decreasing across calls).
  void record(std::uint64_t now, ChargeMark mark);
  // What was charged from `from` to `to` (monotonic ns), the charge between
  // two marks taken as accrued evenly. Before the oldest mark the charge
  // reads as that mark, after the newest as the newest; a tenant that came
  // back between two marks is taken to have come back at the first.
  // 0 without marks.
  std::int64_t charged(std::uint64_t from, std::uint64_t to) const;
  // Whether the marks reach back to `t` (a stretch from before the oldest
  // mark would read its charges short).
  bool covers(std::uint64_t t) const { return size_ != 0 && nth(0).at <= t; }
  bool empty() const { return size_ == 0; }

 private:
  struct Point {
    std::uint64_t at = 0;
    ChargeMark mark;
  };
  ChargeMark at(std::uint64_t t) const;
  const Point& nth(std::size_t i) const { return ring_[(first_ + i) % kCapacity]; }

  std::array<Point, kCapacity> ring_{};
  std::size_t first_ = 0, size_ = 0;
};

// A stretch of time NVML's samples cover (monotonic ns).
struct Stretch {
  std::uint64_t from_ns = 0, to_ns = 0;
};

// The stretch a tenant is judged over this pass, given the stretches of the
// GPUs its limits entry has figures from (several for a '*' entry): the one
// of the GPU whose scheduler charged it (`gpu_key`), else any of them. None
// when nothing new was sampled, or when the stretch begins before the
// oldest charge kept (the tenant joined partway through it, or NVML
// answered nothing for seconds); a tenant with no charge kept at all is
// judged, against a charge of nothing: its GPU time ran without leases.
std::optional<Stretch> judged_stretch(const std::map<std::string, Stretch>& by_gpu,
                                      const std::string& gpu_key, const ChargeHistory& charges);

}  // namespace cushare::sched
