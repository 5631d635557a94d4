// Pool accounting of stream-ordered allocations (pool_accounting.hpp; the
// hooks are in hooks/pool.cpp).
// Each memory pool the process allocates from has a record (pool_table.hpp)
// with the bytes charged for it; after every allocation the pool's
// CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT is read and the difference charged
// or returned. The allocation itself reserves its size first (an upper bound
// on the growth it can cause, for the usual granularities), so racing
// processes cannot jointly exceed the quota; the rare growth above that
// bound is reserved after the fact or the allocation is undone.
//
// A pool without a record would keep memory the quota never sees, so a pool
// that does not fit the table is refused: at cuMemPoolCreate, or at its
// first allocation (a device's default pool, a pool made through a path the
// shim does not hook).
#include "shim/accounting/pool_accounting.hpp"

#include <atomic>

#include "shim/accounting/capture_tracker.hpp"
#include "shim/accounting/graph_accounting.hpp"
#include "shim/accounting/memory_accounting.hpp"
#include "shim/accounting/memory_quiescence.hpp"
#include "shim/accounting/pool_table.hpp"
#include "shim/driver/real_driver.hpp"
#include "shim/process/logging.hpp"
#include "shm/quota_ledger.hpp"

namespace cushare::shim {
namespace {

CUresult reserved_now(CUmemoryPool pool, std::uint64_t& out) noexcept {
  cuuint64_t v = 0;
  const CUresult rc = real().cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v);
  if (rc == CUDA_SUCCESS) out = v;
  return rc;
}

// Brings the charge of record `i` down to the pool's reservation if it
// shrank (frees, trims). Growth is charged only by allocations.
// The reservation is read with the record's lock held: read before it, it
// could predate another thread's allocation that grew the pool and settled
// its growth meanwhile, and the difference would return that growth to the
// quota while the pool still holds it. (Growth not yet settled is covered
// by its allocation's own reservation in the ledger.)
void settle_shrink(const AllocationState& st, unsigned i) noexcept {
  auto& rec = pool_record(i);
  const auto key = rec.key.load(std::memory_order_acquire);
  if (key <= PoolRecord::kRetiredKey) return;
  rec.lock();
  std::uint64_t now = 0;
  if (rec.key.load(std::memory_order_relaxed) == key &&
      reserved_now(reinterpret_cast<CUmemoryPool>(key), now) == CUDA_SUCCESS && now < rec.charged) {
    release(st, rec.gpu, rec.charged - now);
    rec.charged = now;
  }
  rec.unlock();
}

// With the lock held: a destroyed pool's memory goes with its last pointer.
void release_if_unused_locked(const AllocationState& st, PoolRecord& rec) noexcept {
  if (!retired_and_unused_locked(rec)) return;
  release(st, rec.gpu, rec.charged);
  free_pool_record_locked(rec);
}

// A pointer of record `i` was freed.
void pointer_gone(const AllocationState& st, unsigned i) noexcept {
  auto& rec = pool_record(i);
  rec.lock();
  if (rec.outstanding) --rec.outstanding;
  const bool retired = rec.key.load(std::memory_order_relaxed) == PoolRecord::kRetiredKey;
  release_if_unused_locked(st, rec);
  rec.unlock();
  if (!retired) settle_shrink(st, i);
}

// An allocation counted in flight on record `i` ended without a pointer.
void inflight_done(const AllocationState& st, unsigned i) noexcept {
  auto& rec = pool_record(i);
  rec.lock();
  rec.inflight.fetch_sub(1, std::memory_order_acq_rel);
  release_if_unused_locked(st, rec);
  rec.unlock();
}

}  // namespace

void log_pool_table_full(const char* api) noexcept {
  log().error(
      "{} refused: this process already has {} memory pools, the most the memory quota can "
      "account (destroyed pools count until their last allocation is freed); returning "
      "CUDA_ERROR_OUT_OF_MEMORY",
      api, kMaxPools);
}

CUresult pool_alloc(const AllocationState& st, CUdeviceptr* dptr, std::size_t bytes,
                    CUmemoryPool pool, CUstream stream, const char* api, DriverCall call) noexcept {
  // Under capture the call creates a graph allocation node: graph memory is
  // charged when the graph runs (cuGraphLaunch/cuGraphUpload).
  if (stream_is_capturing(stream)) {
    const CUresult rc = call();
    if (rc == CUDA_SUCCESS) {
      // Graph launches settle from now on, whether or not the capture that
      // holds the node is known (its bytes then are charged after a launch).
      graph_memory_expected();
      static std::atomic<bool> said{false};
      if (!capture_add_alloc(stream, bytes) && !said.exchange(true))
        log().warn(
            "{} of {} bytes captured in a capture the shim does not know (more than it tracks "
            "at once): charged once a launch of its graph allocates it, as are later ones "
            "(said once)",
            api, bytes);
    }
    return rc;
  }
  if (!dptr || bytes == 0) return call();
  CUdevice dev;
  const unsigned gpu = allocation_gpu_index(st, dev);
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  const MemoryOp op(&st);
  const RealDriver& r = real();

  if (!r.cuMemPoolGetAttribute || (!pool && !r.cuDeviceGetMemPool)) {
    // A driver without pool attributes: charge this pointer like cuMemAlloc.
    if (!reserve(st, gpu, bytes, api)) return CUDA_ERROR_OUT_OF_MEMORY;
    const CUresult rc = call();
    if (rc != CUDA_SUCCESS) {
      release(st, gpu, bytes);
      return rc;
    }
    device_pointers().insert(
        *dptr, Charge{bytes, static_cast<std::uint8_t>(gpu), ChargeKind::kAsyncDirect, 0});
    return rc;
  }
  if (!pool) {
    if (const CUresult e = r.cuDeviceGetMemPool(&pool, dev); e != CUDA_SUCCESS) return e;
  }
  // A pool the driver does not know gets no record.
  std::uint64_t before = 0;
  if (const CUresult e = reserved_now(pool, before); e != CUDA_SUCCESS) return e;
  const unsigned idx = find_or_add_pool(pool, gpu);
  if (idx == kNoPool) {
    log_pool_table_full(api);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto& rec = pool_record(idx);
  rec.inflight.fetch_add(1, std::memory_order_acq_rel);
  note_pools_in_use();

  if (!reserve(st, gpu, bytes, api)) {
    inflight_done(st, idx);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    release(st, gpu, bytes);
    inflight_done(st, idx);
    return rc;
  }
  rec.lock();
  rec.inflight.fetch_sub(1, std::memory_order_acq_rel);
  // Read under the lock, like settle_shrink, so that growth and shrinkage
  // settle in the order the pool saw them. Unreadable: destroyed meanwhile;
  // the whole reservation stays with the pool.
  std::uint64_t after = 0;
  const bool readable = reserved_now(pool, after) == CUDA_SUCCESS;
  if (rec.key.load(std::memory_order_relaxed) != reinterpret_cast<std::uintptr_t>(pool)) {
    // Destroyed (and its record settled) while the driver allocated: undone,
    // so the driver frees the pool as the ledger already did.
    release_if_unused_locked(st, rec);
    rec.unlock();
    r.cuMemFreeAsync(*dptr, stream);
    release(st, gpu, bytes);
    return CUDA_ERROR_INVALID_VALUE;
  }
  const std::uint64_t growth = !readable ? bytes : (after > rec.charged ? after - rec.charged : 0);
  bool refused = false;
  if (growth <= bytes) {
    release(st, gpu, bytes - growth);
  } else if (!shm::QuotaLedger(*st.usage).try_reserve(rec.gpu, *st.slot, growth - bytes,
                                                      memory_limit(st, rec.gpu))) {
    refused = true;
  }
  if (!refused) {
    rec.charged += growth;
    ++rec.outstanding;
    if (readable && after < rec.charged) {  // shrank meanwhile (a trim or a release elsewhere)
      release(st, rec.gpu, rec.charged - after);
      rec.charged = after;
    }
  }
  rec.unlock();
  if (refused) {
    r.cuMemFreeAsync(*dptr, stream);
    release(st, gpu, bytes);
    settle_shrink(st, idx);
    reserve(st, gpu, growth, api);  // logs the refusal (and cannot succeed here)
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  device_pointers().insert(*dptr, Charge{0, static_cast<std::uint8_t>(gpu), ChargeKind::kAsyncPool,
                                         static_cast<std::uint16_t>(idx)});
  return rc;
}

CUresult async_free(CUdeviceptr dptr, CUstream stream, DriverCall call) noexcept {
  const AllocationState* st = allocation_state();
  if (!st || !dptr || stream_is_capturing(stream)) return call();
  const MemoryOp op(st);
  auto charge = device_pointers().take(dptr);
  const CUresult rc = call();
  if (charge) {
    if (rc == CUDA_SUCCESS) {
      release_charge(*st, *charge);
    } else {
      device_pointers().insert(dptr, *charge);
    }
  }
  return rc;
}

void pool_pointer_freed(const AllocationState& st, const Charge& charge) noexcept {
  if (charge.aux < kMaxPools) pointer_gone(st, charge.aux);
}

bool pool_created(const AllocationState& st, CUmemoryPool pool,
                  const CUmemPoolProps& props) noexcept {
  if (props.location.type != CU_MEM_LOCATION_TYPE_DEVICE) return true;
  const unsigned gpu = gpu_index_of_device(st, props.location.id);
  return gpu >= shm::kMaxGpus || find_or_add_pool(pool, gpu) != kNoPool;
}

void pool_destroyed(const AllocationState& st, CUmemoryPool pool) noexcept {
  const unsigned i = find_pool(pool);
  if (i == kNoPool) return;
  auto& rec = pool_record(i);
  rec.lock();
  if (rec.key.load(std::memory_order_relaxed) == reinterpret_cast<std::uintptr_t>(pool)) {
    // The driver frees a destroyed pool once its last allocation is freed.
    rec.key.store(PoolRecord::kRetiredKey, std::memory_order_release);
    release_if_unused_locked(st, rec);
  }
  rec.unlock();
}

void pool_trimmed(const AllocationState& st, CUmemoryPool pool) noexcept {
  const unsigned i = find_pool(pool);
  if (i != kNoPool) settle_shrink(st, i);
}

void trim_pools(const AllocationState& st, unsigned gpu) noexcept {
  const RealDriver& r = real();
  for (unsigned i = 0; i < kMaxPools; ++i) {
    auto& rec = pool_record(i);
    const auto key = rec.key.load(std::memory_order_acquire);
    if (key <= PoolRecord::kRetiredKey || rec.gpu != gpu) continue;
    if (r.cuMemPoolTrimTo) r.cuMemPoolTrimTo(reinterpret_cast<CUmemoryPool>(key), 0);
    settle_shrink(st, i);
  }
}

bool pool_figures(unsigned gpu, PoolFigures& out) noexcept {
  out = {};
  bool known = true;
  for (unsigned i = 0; i < kMaxPools; ++i) {
    auto& rec = pool_record(i);
    if (rec.key.load(std::memory_order_acquire) == 0) continue;
    rec.lock();
    const auto key = rec.key.load(std::memory_order_relaxed);
    if (key != 0 && rec.gpu == gpu) {
      out.charged += rec.charged;
      std::uint64_t now = rec.charged;
      if (key != PoolRecord::kRetiredKey &&
          reserved_now(reinterpret_cast<CUmemoryPool>(key), now) != CUDA_SUCCESS)
        known = false;
      out.reserved += now;
    }
    rec.unlock();
  }
  return known;
}

void pool_reset_after_fork() noexcept {
  pool_table_reset_after_fork();
}

}  // namespace cushare::shim
