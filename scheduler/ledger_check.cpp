#include "scheduler/ledger_check.hpp"

#include "shm/process_slots.hpp"

namespace cushare::sched {

std::uint64_t slot_total(const shm::UsageRegion& usage, unsigned gpu) {
  std::uint64_t sum = 0;
  for (const auto& slot : usage.slots) {
    if (shm::slot_state(slot) != shm::SlotState::kActive) continue;
    sum += slot.bytes[gpu].load(std::memory_order_relaxed);
    sum += slot.overhead[gpu].load(std::memory_order_relaxed);
  }
  return sum;
}

}  // namespace cushare::sched
