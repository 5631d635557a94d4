// The memory pools a process allocates from, each with the bytes of the
// quota it holds (pool_accounting.hpp charges and settles them).
//
// A fixed table of kMaxPools records with stable indices (a charged pointer
// names its pool's record). Finding a pool is lock-free and, in the common
// case, one hashed hint plus one compare; adding and removing records (pool
// creation, a pool's first use, destruction: rare) serialise on a spinlock.
// When the table is full nothing is added: the caller must then refuse the
// pool or the allocation, since the memory of a pool without a record would
// escape the quota.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "shim/driver/cuda_api.hpp"

namespace cushare::shim {

inline constexpr unsigned kMaxPools = 256;
inline constexpr unsigned kNoPool = kMaxPools;

struct PoolRecord {
  // The CUmemoryPool; 0: a free record; kRetiredKey: the pool was destroyed
  // while pointers from it were live, so the driver keeps its memory until
  // the last of them is freed (and no lookup may find it any more).
  std::atomic<std::uintptr_t> key{0};
  std::atomic<bool> locked{false};
  // Allocations between finding this record and settling on it. Counted
  // without the lock (the hot path takes it once, to settle); whatever pool
  // the record belongs to meanwhile, it is not freed while any is in flight.
  std::atomic<std::uint32_t> inflight{0};
  // Under the lock:
  std::uint8_t gpu = 0;
  std::uint64_t charged = 0;      // bytes of the quota this pool holds
  std::uint32_t outstanding = 0;  // pointers allocated from it, not yet freed

  static constexpr std::uintptr_t kRetiredKey = 1;  // pool handles are aligned: never 1

  // Held across one query of the pool's reservation (a driver call), so a
  // waiter that cannot get it soon gives its CPU to the holder.
  void lock() noexcept {
    for (unsigned spins = 0; locked.exchange(true, std::memory_order_acquire); ++spins) {
      if (spins >= 64) sched_yield();
    }
  }
  void unlock() noexcept { locked.store(false, std::memory_order_release); }
};

PoolRecord& pool_record(unsigned index) noexcept;

// Index of `pool`'s record, kNoPool if it has none. Lock-free.
unsigned find_pool(CUmemoryPool pool) noexcept;

// Index of `pool`'s record, adding one (charged to limits.gpus[gpu]) if it
// has none; kNoPool if the table is full.
unsigned find_or_add_pool(CUmemoryPool pool, unsigned gpu) noexcept;

// With the record's lock held: a destroyed pool's record whose last pointer
// and allocation in flight are gone is free for another pool.
bool retired_and_unused_locked(const PoolRecord& rec) noexcept;
void free_pool_record_locked(PoolRecord& rec) noexcept;

// Fork child: forget the parent's pools.
void pool_table_reset_after_fork() noexcept;

}  // namespace cushare::shim
