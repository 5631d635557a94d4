// Stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync) are
// served from memory pools that keep freed memory cached, so the quota is
// charged with each pool's growth (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
// not per pointer: memory a pool holds counts, whoever owns it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shim/accounting/pointer_table.hpp"
#include "shim/driver/cuda_api.hpp"
#include "shim/driver/driver_call.hpp"
#include "shim/process/allocation_state.hpp"

namespace cushare::shim {

// After a pool-charged pointer was freed (cuMemFreeAsync/cuMemFree): the pool
// may have shrunk; re-reads its reservation and returns what it gave back.
void pool_pointer_freed(const AllocationState& st, const Charge& charge) noexcept;

// A stream-ordered allocation of `bytes` from `pool` (null: the device's
// default pool) made by `call`: charged with the pool's growth, refused
// (CUDA_ERROR_OUT_OF_MEMORY) when that does not fit the quota.
CUresult pool_alloc(const AllocationState& st, CUdeviceptr* dptr, std::size_t bytes,
                    CUmemoryPool pool, CUstream stream, const char* api, DriverCall call) noexcept;
// cuMemFreeAsync made by `call`: the pointer's charge is settled once it succeeded.
CUresult async_free(CUdeviceptr dptr, CUstream stream, DriverCall call) noexcept;
// Logs why `api` was refused: the process has as many pools as the table holds.
void log_pool_table_full(const char* api) noexcept;

// Pool lifecycle (hooks/pool.cpp).
// pool_created: false when the pool cannot be tracked (the table is full):
// the caller destroys it and refuses.
bool pool_created(const AllocationState& st, CUmemoryPool pool,
                  const CUmemPoolProps& props) noexcept;
void pool_destroyed(const AllocationState& st, CUmemoryPool pool) noexcept;
void pool_trimmed(const AllocationState& st, CUmemoryPool pool) noexcept;

// Trims every pool of `gpu` to what is in use and returns the difference.
void trim_pools(const AllocationState& st, unsigned gpu) noexcept;

// The process's pools on limits entry `gpu`: the quota their records hold,
// and what the driver says they reserve now. The two differ after a
// synchronisation gave cached memory back to the device (the charge follows
// at the pool's next allocation, free or trim). Destroyed pools still
// holding allocations count their charge both ways. False when the driver
// could not tell.
struct PoolFigures {
  std::uint64_t charged = 0;
  std::uint64_t reserved = 0;
};
bool pool_figures(unsigned gpu, PoolFigures& out) noexcept;

// Fork child: forget the parent's pools.
void pool_reset_after_fork() noexcept;

}  // namespace cushare::shim
