#include "shim/gate/demand.hpp"

#include <array>
#include <mutex>
#include <new>

#include "shim/process/allocation_state.hpp"
#include "shm/process_slots.hpp"

namespace cushare::shim::gate {
namespace {

// Off the fast path (a thread only gets here to sleep), so a mutex keeps the
// first-in / last-out transitions of the slot's mark in order.
struct GpuDemand {
  std::mutex mu;
  unsigned threads = 0;
  // Where the first thread in put the mark: the last one out clears that
  // one, even if the slot was released meanwhile (exit; the release took the
  // bit back, and clearing a clear bit changes nothing).
  shm::UsageRegion* region = nullptr;
  shm::ProcessSlot* slot = nullptr;
};

// Never destroyed: threads may still wait at the gate while exit handlers run.
std::array<GpuDemand, shm::kMaxGpus>& demands() noexcept {
  static auto* d = new std::array<GpuDemand, shm::kMaxGpus>();
  return *d;
}

}  // namespace

void demand_enter(unsigned gpu, shm::GpuUsage& usage) noexcept {
  GpuDemand& d = demands()[gpu];
  std::lock_guard lock(d.mu);
  if (d.threads++ != 0) return;
  const AllocationState* st = allocation_state();
  d.region = st && st->slot ? st->usage : nullptr;
  d.slot = st ? st->slot : nullptr;
  if (d.region) {
    shm::mark_demand(*d.region, *d.slot, gpu);
  } else {
    usage.demand.fetch_add(1, std::memory_order_acq_rel);  // no slot: counted, not reclaimable
  }
}

void demand_leave(unsigned gpu, shm::GpuUsage& usage) noexcept {
  GpuDemand& d = demands()[gpu];
  std::lock_guard lock(d.mu);
  if (d.threads == 0 || --d.threads != 0) return;
  if (d.region) {
    shm::clear_demand(*d.region, *d.slot, gpu);
  } else {
    std::uint32_t cur = usage.demand.load(std::memory_order_relaxed);
    while (cur > 0 && !usage.demand.compare_exchange_weak(cur, cur - 1)) {
    }
  }
  d.region = nullptr;
  d.slot = nullptr;
}

void reset_demand_after_fork() noexcept {
  // A parent thread may have held a mutex at fork time.
  for (GpuDemand& d : demands()) {
    new (&d.mu) std::mutex();
    d.threads = 0;
    d.region = nullptr;
    d.slot = nullptr;
  }
}

}  // namespace cushare::shim::gate
