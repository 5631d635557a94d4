#include "tests/fakegpu/cuda/vmm_physical.hpp"

#include <unistd.h>

#include <map>

#include "tests/fakegpu/core/shared_allocations.hpp"

namespace fakegpu {
namespace {

std::map<int32_t, PhysicalHandle*>& by_slot() {
  static auto* map = new std::map<int32_t, PhysicalHandle*>();
  return *map;
}

}  // namespace

// Handles that are not live are CUDA_ERROR_INVALID_VALUE, the error the VMM
// API documents for every bad argument.
PhysicalHandle* as_physical(CUmemGenericAllocationHandle handle) {
  return handle_object<PhysicalHandle>(handle, HandleKind::vmm_allocation);
}

FreedPhysical maybe_free_physical(PhysicalHandle* h) {
  if (h->refs > 0 || h->mappings > 0) return {};
  unregister_handle(h, HandleKind::vmm_allocation);
  FreedPhysical freed{h->device, h->charged, h->shared_slot};
  if (h->shared_slot >= 0) {
    freed.bytes = 0;  // the shared entry holds the charge
    by_slot().erase(h->shared_slot);
  }
  if (h->memfd >= 0) close(h->memfd);
  if (h->backing) release_backing(*h->backing);
  delete h;
  return freed;
}

void settle_freed(const FreedPhysical& freed) {
  if (freed.bytes) uncharge_device(freed.device, freed.bytes);
  if (freed.shared_slot < 0) return;
  Driver& d = driver();
  StateLock lock(*d.file);
  drop_shared(lock.state(), freed.shared_slot, d.proc);
}

PhysicalHandle* shared_physical(int32_t slot) {
  auto it = by_slot().find(slot);
  return it == by_slot().end() ? nullptr : it->second;
}

void remember_shared(int32_t slot, PhysicalHandle* h) {
  by_slot()[slot] = h;
}

}  // namespace fakegpu
