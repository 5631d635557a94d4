// The daemon's check of an allocation's ledger (usage.gpus[g].used_bytes)
// against what its live slots hold. The total is a cache of that sum that
// the allocation's own processes write, so it can be wrong: forged, or
// wrapped below zero after a forged value was released. A difference that a
// reservation or release in flight explains lasts nanoseconds (a thread
// preempted between its two steps: milliseconds); one seen unchanged on
// kStablePasses passes in a row (a few hundred ms apart) is repaired by
// exactly that amount (added, not stored, so reservations racing the repair
// are kept).
#pragma once

#include <cstdint>
#include <optional>

#include "shm/layout.hpp"

namespace cushare::sched {

// Sum of bytes and overhead of every active slot on `gpu` (wrapping, like the
// ledger itself, so a forged slot cannot make the sum overflow into a trap).
std::uint64_t slot_total(const shm::UsageRegion& usage, unsigned gpu);

class LedgerCheck {
 public:
  // `used` is the ledger, `held` the slots' sum. Returns the amount to add to
  // the ledger (two's complement: a "negative" amount lowers it), or nullopt.
  static constexpr int kStablePasses = 3;

  std::optional<std::uint64_t> correction(std::uint64_t used, std::uint64_t held) {
    const std::uint64_t diff = held - used;  // what the ledger lacks, modulo 2^64
    seen_ = diff != 0 && diff == last_ ? seen_ + 1 : 1;
    last_ = diff;
    if (diff == 0 || seen_ < kStablePasses) return std::nullopt;
    last_ = 0;
    seen_ = 0;
    return diff;
  }

 private:
  std::uint64_t last_ = 0;
  int seen_ = 0;
};

}  // namespace cushare::sched
