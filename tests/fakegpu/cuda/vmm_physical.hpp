#pragma once
// This process's VMM physical allocations (CUmemGenericAllocationHandle),
// shared by cuMemCreate/Map/Release (api_vmm_pool.cpp) and the file
// descriptor export and import (api_vmm_share.cpp).
#include <cstdint>
#include <memory>

#include "tests/fakegpu/cuda/driver.hpp"

namespace fakegpu {

struct PhysicalHandle {
  CUmemAllocationProp prop{};
  uint64_t size = 0;
  uint64_t charged = 0;  // bytes this process charged at cuMemCreate (0 for imports)
  int device = 0;
  int refs = 1;  // cuMemCreate or import + cuMemRetainAllocationHandle, minus cuMemRelease
  int mappings = 0;
  std::shared_ptr<Backing> backing;
  // Exported or imported: its entry in the node's table, and the memfd every
  // exported descriptor duplicates.
  int32_t shared_slot = -1;
  int memfd = -1;
};

// The live allocation behind a handle value, or nullptr. Caller holds driver().mu.
PhysicalHandle* as_physical(CUmemGenericAllocationHandle handle);

// What freeing an allocation leaves to do once driver().mu is dropped (the
// state file is locked without it): return `bytes` to the device, or give up
// this process's hold of a shared entry.
struct FreedPhysical {
  int device = 0;
  uint64_t bytes = 0;
  int32_t shared_slot = -1;
};

// Frees the allocation once it is released and unmapped everywhere in this
// process. Caller holds driver().mu.
FreedPhysical maybe_free_physical(PhysicalHandle* h);
// Caller does not hold driver().mu.
void settle_freed(const FreedPhysical& freed);

// This process's allocation for a shared entry, or nullptr. Caller holds driver().mu.
PhysicalHandle* shared_physical(int32_t slot);
void remember_shared(int32_t slot, PhysicalHandle* h);

}  // namespace fakegpu
