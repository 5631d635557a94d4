// Stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync) are
// served from memory pools that keep freed memory cached, so the quota is
// charged with each pool's growth (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
// not per pointer: memory a pool holds counts, whoever owns it.
#pragma once

#include <cstdint>

#include "shim/allocation_state.hpp"
#include "shim/cuda_api.hpp"
#include "shim/pointer_table.hpp"

namespace cushare::shim {

// After a pool-charged pointer was freed (cuMemFreeAsync/cuMemFree): the pool
// may have shrunk; re-reads its reservation and returns what it gave back.
void pool_pointer_freed(const AllocationState& st, const Charge& charge) noexcept;

// Pool lifecycle hooks (the wrappers live in pool_accounting.cpp).
// pool_created: false when the pool cannot be tracked (the table is full):
// the caller destroys it and refuses.
bool pool_created(const AllocationState& st, CUmemoryPool pool,
                  const CUmemPoolProps& props) noexcept;
void pool_destroyed(const AllocationState& st, CUmemoryPool pool) noexcept;
void pool_trimmed(const AllocationState& st, CUmemoryPool pool) noexcept;

// Trims every pool of `gpu` to what is in use and returns the difference.
void trim_pools(const AllocationState& st, unsigned gpu) noexcept;

// Fork child: forget the parent's pools.
void pool_reset_after_fork() noexcept;

}  // namespace cushare::shim
