// The device-memory quota ledger on the `usage` region. Hot path of every
// device allocation: header-only, lock-free, no syscall, no allocation.
//
// Invariant: usage.gpus[g].used_bytes == sum over live slots of
// (bytes[g] + overhead[g]), and try_reserve never moves used_bytes above the
// limit it is given, whatever the number of racing processes. Reservations use
// a CAS loop (load, check, compare-exchange) rather than fetch_add + rollback:
// the joint guarantee is the same, and in addition no observer (cusharectl,
// cuMemGetInfo in another process, the daemon) ever sees a transient total
// above the quota.
//
// Crash ordering: a reservation adds to the total first and to the slot
// second; a release subtracts from the slot first and the total second. A
// process killed between the two steps therefore leaves the total too HIGH
// by one allocation (fail closed; the daemon's reconciliation with NVML fixes
// it), never too low.
#pragma once

#include <atomic>
#include <cstdint>

#include "shm/layout.hpp"

namespace cushare::shm {

class QuotaLedger {
 public:
  explicit QuotaLedger(UsageRegion& usage) : usage_(&usage) {}

  // Reserves `bytes` on GPU `gpu` for `slot` if the total stays <= limit
  // (limit == kUnlimited: always, as long as the total does not overflow).
  // Returns false and changes nothing otherwise. Preconditions: gpu < kMaxGpus,
  // slot is the caller's own active slot.
  bool try_reserve(unsigned gpu, ProcessSlot& slot, std::uint64_t bytes, std::uint64_t limit) {
    if (!add_to_total(gpu, bytes, limit)) return false;
    slot.bytes[gpu].fetch_add(bytes, std::memory_order_relaxed);
    return true;
  }

  // Returns `bytes` reserved earlier by try_reserve for this slot.
  void release(unsigned gpu, ProcessSlot& slot, std::uint64_t bytes) {
    slot.bytes[gpu].fetch_sub(bytes, std::memory_order_relaxed);
    total(gpu).fetch_sub(bytes, std::memory_order_release);
  }

  // Charges context/module overhead (the shim's estimate) if it fits in the
  // quota; false and no change otherwise.
  bool try_charge_overhead(unsigned gpu, ProcessSlot& slot, std::uint64_t bytes,
                           std::uint64_t limit) {
    if (!add_to_total(gpu, bytes, limit)) return false;
    slot.overhead[gpu].fetch_add(bytes, std::memory_order_relaxed);
    return true;
  }

  // Charges overhead unconditionally: it is memory the driver already holds,
  // so it counts even when it pushes the total over the quota (later
  // reservations then fail until memory is freed).
  void charge_overhead(unsigned gpu, ProcessSlot& slot, std::uint64_t bytes) {
    total(gpu).fetch_add(bytes, std::memory_order_acq_rel);
    slot.overhead[gpu].fetch_add(bytes, std::memory_order_relaxed);
  }

  // Returns up to `bytes` of the slot's overhead (never below zero: the
  // daemon may have replaced the slot's figure with a smaller measurement
  // meanwhile). Returns what was returned.
  std::uint64_t release_overhead(unsigned gpu, ProcessSlot& slot, std::uint64_t bytes) {
    auto& o = slot.overhead[gpu];
    std::uint64_t cur = o.load(std::memory_order_relaxed);
    std::uint64_t take = 0;
    do {
      take = cur < bytes ? cur : bytes;
    } while (!o.compare_exchange_weak(cur, cur - take, std::memory_order_acq_rel,
                                      std::memory_order_relaxed));
    total(gpu).fetch_sub(take, std::memory_order_release);
    return take;
  }

  // Replaces the slot's overhead with a measured value (the daemon's NVML
  // figure replacing the shim's estimate) and moves the total by the
  // difference. Returns the previous value. Like charge_overhead it may push
  // the total over the quota. Call only on an active slot, from its owner or
  // from the daemon's single reclaiming thread (see docs/shm.md).
  std::uint64_t set_overhead(unsigned gpu, ProcessSlot& slot, std::uint64_t new_value) {
    const std::uint64_t old = slot.overhead[gpu].exchange(new_value, std::memory_order_acq_rel);
    if (new_value >= old) {
      total(gpu).fetch_add(new_value - old, std::memory_order_acq_rel);
    } else {
      total(gpu).fetch_sub(old - new_value, std::memory_order_release);
    }
    return old;
  }

  // set_overhead only if the slot's overhead is still `expected` (the
  // daemon's measurement was taken against it): false and no change when
  // the owner charged or returned overhead since.
  bool replace_overhead(unsigned gpu, ProcessSlot& slot, std::uint64_t expected,
                        std::uint64_t new_value) {
    if (!slot.overhead[gpu].compare_exchange_strong(expected, new_value, std::memory_order_acq_rel,
                                                    std::memory_order_relaxed))
      return false;
    if (new_value >= expected) {
      total(gpu).fetch_add(new_value - expected, std::memory_order_acq_rel);
    } else {
      total(gpu).fetch_sub(expected - new_value, std::memory_order_release);
    }
    return true;
  }

  std::uint64_t used(unsigned gpu) const {
    return usage_->gpus[gpu].used_bytes.load(std::memory_order_acquire);
  }

 private:
  std::atomic<std::uint64_t>& total(unsigned gpu) { return usage_->gpus[gpu].used_bytes; }

  bool add_to_total(unsigned gpu, std::uint64_t bytes, std::uint64_t limit) {
    auto& t = total(gpu);
    std::uint64_t cur = t.load(std::memory_order_relaxed);
    for (;;) {
      // cur + bytes <= limit, written so that it cannot overflow.
      if (bytes > limit || cur > limit - bytes) return false;
      if (t.compare_exchange_weak(cur, cur + bytes, std::memory_order_acq_rel,
                                  std::memory_order_relaxed))
        return true;
    }
  }

  UsageRegion* usage_;
};

}  // namespace cushare::shm
