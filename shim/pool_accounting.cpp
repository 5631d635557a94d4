// Stream-ordered allocation hooks and pool accounting (pool_accounting.hpp).
// Each memory pool the process allocates from has a record with the bytes
// charged for it; after every allocation the pool's
// CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT is read and the difference charged
// or returned. The allocation itself reserves its size first (an upper bound
// on the growth it can cause, for the usual granularities), so racing
// processes cannot jointly exceed the quota; the rare growth above that
// bound is reserved after the fact or the allocation is undone.
#include "shim/pool_accounting.hpp"

#include <atomic>

#include "shim/capture_tracker.hpp"
#include "shim/graph_accounting.hpp"
#include "shim/hook_decls.hpp"
#include "shim/hook_support.hpp"
#include "shim/logging.hpp"
#include "shim/memory_accounting.hpp"
#include "shm/quota_ledger.hpp"

namespace cushare::shim {
namespace {

constexpr unsigned kMaxPools = 256;

struct PoolRecord {
  std::atomic<std::uintptr_t> pool{0};  // CUmemoryPool; 0 = free entry
  std::atomic<bool> locked{false};
  std::uint8_t gpu = 0;
  std::uint64_t charged = 0;  // bytes of the quota this pool holds

  void lock() noexcept {
    while (locked.exchange(true, std::memory_order_acquire)) {
    }
  }
  void unlock() noexcept { locked.store(false, std::memory_order_release); }
};

constinit PoolRecord g_pools[kMaxPools];

std::uintptr_t key_of(CUmemoryPool pool) {
  return reinterpret_cast<std::uintptr_t>(pool);
}

// Record index of `pool`, adding it (on `gpu`) if new; kMaxPools if full.
unsigned find_or_add(CUmemoryPool pool, unsigned gpu) noexcept {
  const auto key = key_of(pool);
  for (unsigned i = 0; i < kMaxPools; ++i)
    if (g_pools[i].pool.load(std::memory_order_acquire) == key) return i;
  for (unsigned i = 0; i < kMaxPools; ++i) {
    std::uintptr_t expected = 0;
    auto& rec = g_pools[i];
    rec.lock();
    if (rec.pool.compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
      rec.gpu = static_cast<std::uint8_t>(gpu);
      rec.charged = 0;
      rec.unlock();
      return i;
    }
    rec.unlock();
    if (expected == key) return i;
  }
  return kMaxPools;
}

unsigned find(CUmemoryPool pool) noexcept {
  const auto key = key_of(pool);
  for (unsigned i = 0; i < kMaxPools; ++i)
    if (g_pools[i].pool.load(std::memory_order_acquire) == key) return i;
  return kMaxPools;
}

bool reserved_now(CUmemoryPool pool, std::uint64_t& out) noexcept {
  cuuint64_t v = 0;
  const RealDriver& r = real();
  if (!r.cuMemPoolGetAttribute ||
      r.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS)
    return false;
  out = v;
  return true;
}

// Brings the charge of record `i` down to the pool's reservation if it
// shrank (frees, trims). Growth is charged only by allocations.
void settle_shrink(const AllocationState& st, unsigned i) noexcept {
  auto& rec = g_pools[i];
  const auto key = rec.pool.load(std::memory_order_acquire);
  if (!key) return;
  std::uint64_t now = 0;
  if (!reserved_now(reinterpret_cast<CUmemoryPool>(key), now)) return;
  rec.lock();
  if (now < rec.charged) {
    release(st, rec.gpu, rec.charged - now);
    rec.charged = now;
  }
  rec.unlock();
}

template <class Call>
CUresult pool_alloc(const AllocationState& st, CUdeviceptr* dptr, std::size_t bytes,
                    CUmemoryPool pool, CUstream stream, const char* api, Call&& call) noexcept {
  // Under capture the call creates a graph allocation node: graph memory is
  // charged when the graph runs (cuGraphLaunch/cuGraphUpload).
  if (stream_is_capturing(stream)) {
    const CUresult rc = call();
    if (rc == CUDA_SUCCESS) capture_add_alloc(stream, bytes);
    return rc;
  }
  if (!dptr || bytes == 0) return call();
  CUdevice dev;
  const unsigned gpu = current_gpu_index(st, dev);
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  const RealDriver& r = real();
  if (!pool && (!r.cuDeviceGetMemPool || r.cuDeviceGetMemPool(&pool, dev) != CUDA_SUCCESS))
    pool = nullptr;
  std::uint64_t before = 0;
  const unsigned idx = pool && reserved_now(pool, before) ? find_or_add(pool, gpu) : kMaxPools;

  if (!reserve(st, gpu, bytes, api)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    release(st, gpu, bytes);
    return rc;
  }
  std::uint64_t after = 0;
  if (idx == kMaxPools || !reserved_now(pool, after)) {
    // No pool attributes: charge this pointer's size like cuMemAlloc.
    device_pointers().insert(
        *dptr, Charge{bytes, static_cast<std::uint8_t>(gpu), ChargeKind::kAsyncDirect, 0});
    return rc;
  }
  auto& rec = g_pools[idx];
  rec.lock();
  const std::uint64_t growth = after > rec.charged ? after - rec.charged : 0;
  bool refused = false;
  if (growth <= bytes) {
    release(st, gpu, bytes - growth);
  } else if (!shm::QuotaLedger(*st.usage).try_reserve(rec.gpu, *st.slot, growth - bytes,
                                                      memory_limit(st, rec.gpu))) {
    refused = true;
  }
  if (!refused) {
    rec.charged += growth;
    if (after < rec.charged) {  // shrank meanwhile (a trim or a release elsewhere)
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

template <class Call>
CUresult async_free(CUdeviceptr dptr, CUstream stream, Call&& call) noexcept {
  const AllocationState* st = allocation_state();
  if (!st || !dptr || stream_is_capturing(stream)) return call();
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

}  // namespace

void pool_pointer_freed(const AllocationState& st, const Charge& charge) noexcept {
  if (charge.aux < kMaxPools) settle_shrink(st, charge.aux);
}

void pool_created(const AllocationState& st, CUmemoryPool pool,
                  const CUmemPoolProps& props) noexcept {
  if (props.location.type != CU_MEM_LOCATION_TYPE_DEVICE) return;
  const unsigned gpu = gpu_index_of_device(st, props.location.id);
  if (gpu < shm::kMaxGpus) find_or_add(pool, gpu);
}

void pool_destroyed(const AllocationState& st, CUmemoryPool pool) noexcept {
  const unsigned i = find(pool);
  if (i == kMaxPools) return;
  auto& rec = g_pools[i];
  rec.lock();
  release(st, rec.gpu, rec.charged);
  rec.charged = 0;
  rec.pool.store(0, std::memory_order_release);
  rec.unlock();
}

void pool_trimmed(const AllocationState& st, CUmemoryPool pool) noexcept {
  const unsigned i = find(pool);
  if (i != kMaxPools) settle_shrink(st, i);
}

void trim_pools(const AllocationState& st, unsigned gpu) noexcept {
  const RealDriver& r = real();
  for (unsigned i = 0; i < kMaxPools; ++i) {
    const auto key = g_pools[i].pool.load(std::memory_order_acquire);
    if (!key || g_pools[i].gpu != gpu) continue;
    if (r.cuMemPoolTrimTo) r.cuMemPoolTrimTo(reinterpret_cast<CUmemoryPool>(key), 0);
    settle_shrink(st, i);
  }
}

void pool_reset_after_fork() noexcept {
  for (auto& rec : g_pools) {
    rec.pool.store(0, std::memory_order_relaxed);
    rec.locked.store(false, std::memory_order_relaxed);
    rec.charged = 0;
  }
}

}  // namespace cushare::shim

using namespace cushare::shim;

extern "C" CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  const RealDriver& r = real();
  CUSHARE_ACCOUNT_OR(r.cuMemAllocAsync(dptr, bytesize, hStream))
  return pool_alloc(*st, dptr, bytesize, nullptr, hStream, "cuMemAllocAsync",
                    [&] { return r.cuMemAllocAsync(dptr, bytesize, hStream); });
}

extern "C" CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  const RealDriver& r = real();
  CUSHARE_ACCOUNT_OR(r.cuMemAllocAsync_ptsz(dptr, bytesize, hStream))
  return pool_alloc(*st, dptr, bytesize, nullptr, hStream, "cuMemAllocAsync_ptsz",
                    [&] { return r.cuMemAllocAsync_ptsz(dptr, bytesize, hStream); });
}

extern "C" CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                            CUstream hStream) {
  const RealDriver& r = real();
  CUSHARE_ACCOUNT_OR(r.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream))
  if (!pool) return r.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
  return pool_alloc(*st, dptr, bytesize, pool, hStream, "cuMemAllocFromPoolAsync",
                    [&] { return r.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream); });
}

extern "C" CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                 CUmemoryPool pool, CUstream hStream) {
  const RealDriver& r = real();
  CUSHARE_ACCOUNT_OR(r.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream))
  if (!pool) return r.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream);
  return pool_alloc(*st, dptr, bytesize, pool, hStream, "cuMemAllocFromPoolAsync_ptsz",
                    [&] { return r.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream); });
}

extern "C" CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  const RealDriver& r = real();
  return async_free(dptr, hStream, [&] { return r.cuMemFreeAsync(dptr, hStream); });
}

extern "C" CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  const RealDriver& r = real();
  return async_free(dptr, hStream, [&] { return r.cuMemFreeAsync_ptsz(dptr, hStream); });
}

extern "C" CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  const RealDriver& r = real();
  const CUresult rc = r.cuMemPoolCreate(pool, poolProps);
  if (const AllocationState* st = allocation_state(); st && rc == CUDA_SUCCESS && pool && poolProps)
    pool_created(*st, *pool, *poolProps);
  return rc;
}

extern "C" CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  const RealDriver& r = real();
  const CUresult rc = r.cuMemPoolDestroy(pool);
  if (const AllocationState* st = allocation_state(); st && rc == CUDA_SUCCESS)
    pool_destroyed(*st, pool);
  return rc;
}

extern "C" CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  const RealDriver& r = real();
  const CUresult rc = r.cuMemPoolTrimTo(pool, minBytesToKeep);
  if (const AllocationState* st = allocation_state(); st && rc == CUDA_SUCCESS)
    pool_trimmed(*st, pool);
  return rc;
}
