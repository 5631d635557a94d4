// Virtual memory management (cuMemCreate/Map/...) and stream-ordered pools.
#include <algorithm>
#include <map>
#include <set>

#include "tests/fakegpu/cuda/driver.hpp"
#include "tests/fakegpu/cuda/size_math.hpp"
#include "tests/fakegpu/cuda/vmm_physical.hpp"

using namespace fakegpu;

namespace {

constexpr uint64_t kGranularity = 2ull << 20;

// Rounding for sizes already bounded by kMaxAllocationBytes or by device
// memory, where it cannot wrap.
uint64_t round_up_bounded(uint64_t v, uint64_t granule) {
  uint64_t out = 0;
  (void)round_up(v, granule, &out);
  return out;
}

// ---- VMM ----

std::map<uint64_t, uint64_t>& reservations() {
  static auto* map = new std::map<uint64_t, uint64_t>();
  return *map;
}

CUresult check_prop(const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (!valid_ordinal(prop->location.id)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    // Linux drivers export to file descriptors only: Win32 handles do not
    // exist here and fabric handles need IMEX channels
    // (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED is 0).
    if (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
      return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
  }
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
      prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
    // cuda.h: host allocations are not IPC capable.
    return prop->requestedHandleTypes == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

// ---- pools ----

struct Pool {
  CUmemPoolProps props{};
  int device = 0;
  bool is_default = false;
  bool destroyed = false;  // by cuMemPoolDestroy while allocations were live
  uint64_t reserved = 0, reserved_high = 0;
  uint64_t used = 0, used_high = 0;
  uint64_t release_threshold = 0;
  int reuse_follow = 1, reuse_opportunistic = 1, reuse_internal = 1;
};

// The live pools, trimmed at synchronisation points (a pool destroyed while
// its allocations live is neither a handle nor trimmed any more).
std::set<Pool*>& pools() {
  static auto* set = new std::set<Pool*>();
  return *set;
}
Pool* default_pools[kMaxDevices] = {};
Pool* current_pools[kMaxDevices] = {};

// Pool handles that are not live are CUDA_ERROR_INVALID_VALUE, the error the
// pool API documents for a bad argument.
Pool* as_pool(CUmemoryPool p) {
  return handle_object<Pool>(p, HandleKind::memory_pool);
}

void add_pool(Pool* p) {  // caller holds driver().mu
  pools().insert(p);
  register_handle(p, HandleKind::memory_pool);
}

Pool* default_pool(int device) {  // caller holds driver().mu
  if (default_pools[device] == nullptr) {
    auto* p = new Pool();
    p->device = device;
    p->is_default = true;
    p->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->props.location.id = ordinal_of(device);
    add_pool(p);
    default_pools[device] = p;
  }
  return default_pools[device];
}

// Shrinks a pool's reservation to `keep` (never below what is in use).
// Caller holds driver().mu; returns bytes to give back to the device.
uint64_t shrink(Pool* p, uint64_t keep) {
  if (keep >= p->reserved) return 0;  // also UINT64_MAX, the usual "keep everything"
  // Both are below the reservation, itself bounded by device memory.
  const uint64_t floor =
      std::max(round_up_bounded(p->used, kGranularity), round_up_bounded(keep, kGranularity));
  if (p->reserved <= floor) return 0;
  const uint64_t give = p->reserved - floor;
  p->reserved = floor;
  return give;
}

CUresult alloc_from(Pool* pool, CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hStream, &s); r != CUDA_SUCCESS) return r;
  // Before any rounding: a size no device holds would otherwise wrap to a
  // small reservation.
  if (bytesize > kMaxAllocationBytes) return CUDA_ERROR_OUT_OF_MEMORY;
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return capture_alloc(s, bytesize, dptr);
  Driver& d = driver();
  const uint64_t size = round_up_bounded(bytesize, 512);
  uint64_t grow = 0;
  {
    std::lock_guard<std::mutex> guard(d.mu);
    if (pool->used + size > pool->reserved)
      grow = round_up_bounded(pool->used + size - pool->reserved, kGranularity);
  }
  if (grow) {
    if (CUresult r = charge_device(pool->device, grow); r != CUDA_SUCCESS) return r;
  }
  std::unique_lock<std::mutex> guard(d.mu);
  const uint64_t base = va_alloc(size, 512);
  if (base == 0) {  // out of device addresses: give the growth back
    guard.unlock();
    if (grow) uncharge_device(pool->device, grow);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pool->reserved += grow;
  pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  pool->used += size;
  pool->used_high = std::max(pool->used_high, pool->used);
  Region r;
  r.size = bytesize;
  r.kind = RegionKind::async;
  r.device = pool->device;
  r.charged = 0;  // the pool's reservation holds the charge
  r.pool = pool;
  r.backing = std::make_shared<Backing>();
  r.backing->size = bytesize;
  d.regions[base] = std::move(r);
  *dptr = base;
  return CUDA_SUCCESS;
}

CUresult alloc_async(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hStream, &s); r != CUDA_SUCCESS) return r;
  Pool* pool;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    pool = current_pools[s->ctx->device] ? current_pools[s->ctx->device]
                                         : default_pool(s->ctx->device);
  }
  return alloc_from(pool, dptr, bytesize, hStream);
}

CUresult alloc_from_pool(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool hPool, CUstream hStream) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Pool* pool;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    pool = as_pool(hPool);
  }
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return alloc_from(pool, dptr, bytesize, hStream);
}

CUresult free_async(CUdeviceptr dptr, CUstream hStream) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hStream, &s); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return capture_free(s, dptr);  // a free node
  uint64_t uncharge_bytes = 0, graph_bytes = 0;
  int device = 0;
  {
    std::lock_guard<std::mutex> guard(d.mu);
    auto it = d.regions.find(dptr);
    if (it == d.regions.end()) return CUDA_ERROR_INVALID_VALUE;
    Region& r = it->second;

    if (r.kind == RegionKind::graph) {
      graph_bytes = r.size;
      device = r.device;
    } else if (r.kind == RegionKind::async) {
      auto* pool = static_cast<Pool*>(r.pool);
      pool->used -= std::min(pool->used, round_up_bounded(r.size, 512));
      if (pool->destroyed && pool->used == 0) {  // its last allocation: the pool goes
        uncharge_bytes = pool->reserved;
        device = pool->device;
        pool->reserved = 0;
      }
    } else if (r.kind == RegionKind::device || r.kind == RegionKind::pitch) {
      uncharge_bytes = r.charged;  // cuMemFreeAsync may free cuMemAlloc memory too
      device = r.device;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (r.owns_va) va_release(dptr, r.size);
    d.regions.erase(it);
  }
  if (uncharge_bytes) uncharge_device(device, uncharge_bytes);
  if (graph_bytes) graph_memory_freed(device, graph_bytes);
  return CUDA_SUCCESS;
}

}  // namespace

namespace fakegpu {

void trim_pools_after_sync() {
  Driver& d = driver();
  uint64_t give[kMaxDevices] = {};
  {
    std::lock_guard<std::mutex> guard(d.mu);
    for (Pool* p : pools()) give[p->device] += shrink(p, p->release_threshold);
  }
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    if (give[i]) uncharge_device(static_cast<int>(i), give[i]);
  }
}

}  // namespace fakegpu

FAKEGPU_API CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                   const CUmemAllocationProp* prop,
                                                   CUmemAllocationGranularity_flags option) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (granularity == nullptr || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                 option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = check_prop(prop); r != CUDA_SUCCESS) return r;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                 const CUmemAllocationProp* prop, unsigned long long flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (handle == nullptr || size == 0 || size % kGranularity != 0 || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_prop(prop); r != CUDA_SUCCESS) return r;
  const bool on_device = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  // Only device-located handles consume device memory.
  if (on_device) {
    if (CUresult r = charge_device(physical(prop->location.id), size); r != CUDA_SUCCESS) return r;
  }
  auto* h = new PhysicalHandle();
  h->prop = *prop;
  h->size = size;
  h->charged = on_device ? size : 0;
  h->device = on_device ? physical(prop->location.id) : 0;
  h->backing = std::make_shared<Backing>();
  h->backing->size = size;
  std::lock_guard<std::mutex> guard(driver().mu);
  register_handle(h, HandleKind::vmm_allocation);
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(h);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  FreedPhysical freed;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    PhysicalHandle* h = as_physical(handle);
    if (h == nullptr || h->refs <= 0) return CUDA_ERROR_INVALID_VALUE;
    --h->refs;
    freed = maybe_free_physical(h);
  }
  settle_freed(freed);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  Region* r = find_region(reinterpret_cast<uint64_t>(addr), 1);
  if (r == nullptr || r->kind != RegionKind::vmm_map) return CUDA_ERROR_INVALID_VALUE;
  auto* h = static_cast<PhysicalHandle*>(r->pool);
  ++h->refs;
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(h);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                            CUmemGenericAllocationHandle handle) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> guard(driver().mu);
  PhysicalHandle* h = as_physical(handle);
  if (prop == nullptr || h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *prop = h->prop;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                         CUdeviceptr addr, unsigned long long flags) {
  (void)addr;  // the hint is not honoured (allowed by the API)
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (ptr == nullptr || size == 0 || size % kGranularity != 0 || flags != 0 ||
      (alignment & (alignment - 1)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> guard(driver().mu);
  const uint64_t base = va_alloc(size, std::max<uint64_t>(alignment, kGranularity));
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  reservations()[base] = size;
  *ptr = base;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> guard(driver().mu);
  auto it = reservations().find(ptr);
  if (it == reservations().end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  Region* mapped = find_region(ptr, 1);
  for (auto& [base, region] : driver().regions) {
    if (base >= ptr && base < ptr + size) mapped = &region;
  }
  if (mapped) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  va_release(ptr, size);
  reservations().erase(it);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  std::lock_guard<std::mutex> guard(d.mu);
  PhysicalHandle* h = as_physical(handle);
  // A released handle names nothing any more, even while its memory is
  // still mapped elsewhere (cuMemRetainAllocationHandle gives it back).
  // Ranges are compared by subtraction: offset + size could wrap.
  if (h == nullptr || h->refs <= 0 || flags != 0 || size == 0 || size % kGranularity ||
      offset % kGranularity || size > h->size || offset > h->size - size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto res = reservations().upper_bound(ptr);
  if (res == reservations().begin()) return CUDA_ERROR_INVALID_VALUE;
  --res;
  if (ptr < res->first || size > res->second || ptr - res->first > res->second - size)
    return CUDA_ERROR_INVALID_VALUE;
  for (auto& [base, region] : d.regions) {
    if (base < ptr + size && ptr < base + region.size)
      return CUDA_ERROR_INVALID_VALUE;  // overlaps a mapping
  }
  Region r;
  r.size = size;
  r.kind = RegionKind::vmm_map;
  r.device = h->device;
  r.charged = 0;
  r.owns_va = false;
  r.backing = h->backing;
  r.backing_offset = offset;
  r.pool = h;
  d.regions[ptr] = std::move(r);
  ++h->mappings;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  std::vector<FreedPhysical> freed;
  {
    std::lock_guard<std::mutex> guard(d.mu);
    // The range must be exactly one or more adjacent whole mappings: the
    // driver cannot unmap a part of one.
    const uint64_t end = ptr + size;
    if (size == 0 || end < ptr) return CUDA_ERROR_INVALID_VALUE;
    uint64_t covered = ptr;
    auto first = d.regions.lower_bound(ptr);
    for (auto it = first; covered < end; ++it) {
      if (it == d.regions.end() || it->first != covered || it->second.kind != RegionKind::vmm_map ||
          it->first + it->second.size > end) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      covered += it->second.size;
    }
    for (auto it = first; it != d.regions.end() && it->first < end;) {
      auto* h = static_cast<PhysicalHandle*>(it->second.pool);
      --h->mappings;
      freed.push_back(maybe_free_physical(h));
      it = d.regions.erase(it);
    }
  }
  for (const FreedPhysical& f : freed) settle_freed(f);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                    size_t count) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  Region* r = find_region(ptr, 1);
  if (r == nullptr || r->kind != RegionKind::vmm_map || size == 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location,
                                    CUdeviceptr ptr) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  Region* r = find_region(ptr, 1);
  if (r == nullptr || r->kind != RegionKind::vmm_map) return CUDA_ERROR_INVALID_VALUE;
  *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return CUDA_SUCCESS;
}

// ---- pools ----

FAKEGPU_API CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (pool == nullptr || poolProps == nullptr ||
      poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !valid_ordinal(poolProps->location.id)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* p = new Pool();
  p->props = *poolProps;
  p->device = physical(poolProps->location.id);
  std::lock_guard<std::mutex> guard(driver().mu);
  add_pool(p);
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  uint64_t give = 0;
  int device = 0;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    Pool* p = as_pool(pool);
    if (p == nullptr || p->is_default) return CUDA_ERROR_INVALID_VALUE;
    for (auto& c : current_pools) {
      if (c == p) c = nullptr;
    }
    // The handle is gone; the Pool object stays: regions point at it.
    pools().erase(p);
    unregister_handle(p, HandleKind::memory_pool);
    // As documented: with allocations still live the call returns at once
    // and the pool's memory goes when the last of them is freed.
    if (p->used > 0) {
      p->destroyed = true;
    } else {
      give = p->reserved;
      device = p->device;
      p->reserved = 0;
    }
  }
  if (give) uncharge_device(device, give);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  uint64_t give = 0;
  int device = 0;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    Pool* p = as_pool(pool);
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    give = shrink(p, minBytesToKeep);
    device = p->device;
  }
  if (give) uncharge_device(device, give);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                           void* value) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> guard(driver().mu);
  Pool* p = as_pool(pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      p->reuse_follow = *static_cast<int*>(value);
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      p->reuse_opportunistic = *static_cast<int*>(value);
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      p->reuse_internal = *static_cast<int*>(value);
      break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->release_threshold = *static_cast<cuuint64_t*>(value);
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      p->reserved_high = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      p->used_high = p->used;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                           void* value) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> guard(driver().mu);
  Pool* p = as_pool(pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* u64 = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      *static_cast<int*>(value) = p->reuse_follow;
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      *static_cast<int*>(value) = p->reuse_opportunistic;
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = p->reuse_internal;
      break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *u64 = p->release_threshold;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *u64 = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *u64 = p->reserved_high;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *u64 = p->used;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *u64 = p->used_high;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_ordinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> guard(driver().mu);
  *pool_out = reinterpret_cast<CUmemoryPool>(default_pool(physical(dev)));
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_ordinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> guard(driver().mu);
  *pool = reinterpret_cast<CUmemoryPool>(
      current_pools[physical(dev)] ? current_pools[physical(dev)] : default_pool(physical(dev)));
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (!valid_ordinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> guard(driver().mu);
  Pool* p = as_pool(pool);
  if (p == nullptr || p->device != physical(dev)) return CUDA_ERROR_INVALID_VALUE;
  current_pools[physical(dev)] = p;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemGetDefaultMemPool(CUmemoryPool* pool_out, CUmemLocation* location,
                                            CUmemAllocationType type) {
  if (location == nullptr || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
      type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return check_ready() != CUDA_SUCCESS ? check_ready() : CUDA_ERROR_NOT_SUPPORTED;
  }
  return cuDeviceGetDefaultMemPool(pool_out, location->id);
}

FAKEGPU_API CUresult cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location,
                                     CUmemAllocationType type) {
  if (location == nullptr || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
      type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return check_ready() != CUDA_SUCCESS ? check_ready() : CUDA_ERROR_NOT_SUPPORTED;
  }
  return cuDeviceGetMemPool(pool, location->id);
}

FAKEGPU_API CUresult cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type,
                                     CUmemoryPool pool) {
  if (location == nullptr || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
      type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return check_ready() != CUDA_SUCCESS ? check_ready() : CUDA_ERROR_NOT_SUPPORTED;
  }
  return cuDeviceSetMemPool(location->id, pool);
}

FAKEGPU_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream);
}
FAKEGPU_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return alloc_async(dptr, bytesize, hStream);
}
FAKEGPU_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream) {
  return alloc_from_pool(dptr, bytesize, pool, hStream);
}
FAKEGPU_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                  CUmemoryPool pool, CUstream hStream) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return alloc_from_pool(dptr, bytesize, pool, hStream);
}
FAKEGPU_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return free_async(dptr, hStream);
}
FAKEGPU_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return free_async(dptr, hStream);
}
