// Lifetime of charged VMM allocations (cuMemCreate on a device location).
// The driver frees such physical memory only when its handle has been
// released as often as it was obtained (cuMemCreate, then once more per
// cuMemRetainAllocationHandle) AND no mapping (cuMemMap) uses it any more,
// in either order. The charge follows exactly that: per charged allocation
// the handle references and the mappings are counted, and the quota comes
// back when both reach zero.
//
// The calls that change either count run, with the bookkeeping, under one
// lock held across the driver call, so the shim's view never trails the
// driver's (a racing map and release cannot let the charge go while memory
// stays). These are not hot paths: a map costs page-table work in the driver.
// Handles the shim did not charge (imports) are not tracked: their calls
// pass straight through, so mapping or releasing an import never moves quota.
//
// An exported allocation (cuMemExportToShareableHandle) stays charged until
// the process exits: any process receiving the descriptor can import it and
// keep the memory alive after this one released and unmapped it, and
// nothing tells the shim when the last importer lets go. Returning the charge
// at release would let a tenant hold memory that no quota counts.
#pragma once

#include <cstdint>

#include "shim/driver/cuda_api.hpp"
#include "shim/process/allocation_state.hpp"

namespace cushare::shim {

// After a charged cuMemCreate succeeded: `bytes` on limits.gpus[gpu] stay
// charged to `handle` until the allocation is released and unmapped. False:
// no memory for the record; the caller must undo the allocation and refuse.
bool vmm_created(CUmemGenericAllocationHandle handle, unsigned gpu, std::uint64_t bytes) noexcept;

// The driver calls, forwarded and accounted.
CUresult vmm_release(const AllocationState& st, CUmemGenericAllocationHandle handle) noexcept;
CUresult vmm_map(const AllocationState& st, CUdeviceptr ptr, std::size_t size, std::size_t offset,
                 CUmemGenericAllocationHandle handle, unsigned long long flags) noexcept;
CUresult vmm_unmap(const AllocationState& st, CUdeviceptr ptr, std::size_t size) noexcept;
CUresult vmm_retain(CUmemGenericAllocationHandle* handle, void* addr) noexcept;
CUresult vmm_export(void* shareable, CUmemGenericAllocationHandle handle,
                    CUmemAllocationHandleType type, unsigned long long flags) noexcept;
// Sparse-array tiles (cuMemMapArrayAsync): their unmapping does not name the
// allocation, so one mapped there stays charged until the process exits.
CUresult vmm_map_array(CUarrayMapInfo* list, unsigned count, CUstream stream,
                       bool per_thread) noexcept;

// Fork child: the parent's handles and mappings are not the child's.
void vmm_reset_after_fork() noexcept;

}  // namespace cushare::shim
