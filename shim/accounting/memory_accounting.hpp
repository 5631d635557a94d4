// Quota reservations for every allocation path: reserve in the shm ledger
// BEFORE the real allocation, release on failure or free. The fast path is
// the ledger's CAS loop plus one atomic load of the quota; the refusal path
// (rare) reclaims dead processes' slots, trims pools and graph memory, retries
// once, then logs one line and records the refusal in `usage`.
#pragma once

#include <cstdint>

#include "shim/accounting/pointer_table.hpp"
#include "shim/process/allocation_state.hpp"
#include "shm/quota_ledger.hpp"

namespace cushare::shim {

// Device pointers the shim charged (cuMemAlloc*, pitch, managed, async).
PointerTable& device_pointers() noexcept;
// CUarray and CUmipmappedArray handles.
PointerTable& array_handles() noexcept;

namespace detail {
bool reserve_slow(const AllocationState& st, unsigned gpu, std::uint64_t bytes,
                  const char* api) noexcept;
}

// Reserves `bytes` on limits.gpus[gpu] for this process. False: over quota
// (or a GPU outside the allocation); the caller returns
// CUDA_ERROR_OUT_OF_MEMORY and must not forward the call.
inline bool reserve(const AllocationState& st, unsigned gpu, std::uint64_t bytes,
                    const char* api) noexcept {
  if (gpu < shm::kMaxGpus && shm::QuotaLedger(*st.usage).try_reserve(
                                 gpu, *st.slot, bytes, memory_limit(st, gpu))) [[likely]] {
    return true;
  }
  return detail::reserve_slow(st, gpu, bytes, api);
}

inline void release(const AllocationState& st, unsigned gpu, std::uint64_t bytes) noexcept {
  if (gpu < shm::kMaxGpus && bytes) shm::QuotaLedger(*st.usage).release(gpu, *st.slot, bytes);
}

// After a context was destroyed (cuCtxDestroy, the primary context's last
// release or its reset): the driver freed the plain, pitched and managed
// allocations made in it, which the program will never free; their charges
// return (those whose pointer the driver no longer knows).
void release_destroyed_allocations(const AllocationState& st) noexcept;

// Standalone there is no daemon to reclaim the slots of processes that died
// without releasing them (kill -9): memory queries do it, at most once a
// second per process (a scan of the slot states and a /proc read per live
// slot of another process).
void reclaim_dead_slots_now_and_then(const AllocationState& st) noexcept;

// Quota-pressure relief for `gpu`, tried before refusing: trims memory pools
// and graph memory pools so that what they cache but nobody uses returns to
// the quota. Implemented by the pool/graph accounting.
void relieve_quota_pressure(const AllocationState& st, unsigned gpu) noexcept;

}  // namespace cushare::shim

namespace cushare::shim {
// In a fork child: forgets every charge of the parent (pointer tables, pools,
// VMM, context and graph records), the parent's to return. Registered by the
// process's initialisation as the ForkStage::kAccounting reset.
void reset_accounting_after_fork() noexcept;

// Returns a recorded charge after its memory was freed (dispatches on kind).
void release_charge(const AllocationState& st, const Charge& charge) noexcept;
}  // namespace cushare::shim
