#include "shim/accounting/vmm_accounting.hpp"

#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>

#include "shim/accounting/memory_accounting.hpp"
#include "shim/driver/real_driver.hpp"
#include "shim/process/logging.hpp"

namespace cushare::shim {
namespace {

// One charged physical allocation.
struct Physical {
  std::uint64_t bytes = 0;
  std::uint8_t gpu = 0;
  std::uint32_t refs = 0;      // handle references the program still holds
  std::uint32_t mappings = 0;  // cuMemMap ranges backed by it
  bool exported = false;       // pinned until exit: see the header
};

// A handle value naming a charged allocation. The driver hands out the
// handle used to map the memory again at cuMemRetainAllocationHandle, so
// one value usually carries several references.
struct HandleRef {
  Physical* physical = nullptr;
  std::uint32_t refs = 0;
};

struct Mapping {
  std::uint64_t size = 0;
  Physical* physical = nullptr;
};

struct Tables {
  std::mutex mu;
  std::unordered_map<CUmemGenericAllocationHandle, HandleRef> handles;
  std::map<CUdeviceptr, Mapping> mappings;  // by start address; never overlapping
};

// Leaked: hooks still run from atexit handlers after static destructors.
Tables& tables() {
  static auto* t = new Tables;
  return *t;
}

using MappingIt = std::map<CUdeviceptr, Mapping>::iterator;

// Returns the charge once nothing keeps the memory on the device.
void settle(const AllocationState& st, Physical* p) noexcept {
  if (p->refs || p->mappings) return;
  release(st, p->gpu, p->bytes);
  delete p;
}

MappingIt forget_mapping(const AllocationState& st, Tables& t, MappingIt it) noexcept {
  Physical* p = it->second.physical;
  it = t.mappings.erase(it);
  --p->mappings;
  settle(st, p);
  return it;
}

CUdeviceptr range_end(CUdeviceptr ptr, std::size_t size) {
  return size > std::numeric_limits<CUdeviceptr>::max() - ptr
             ? std::numeric_limits<CUdeviceptr>::max()
             : ptr + size;
}

// The first recorded mapping that overlaps [ptr, ...).
MappingIt first_overlapping(Tables& t, CUdeviceptr ptr) {
  auto it = t.mappings.lower_bound(ptr);
  if (it != t.mappings.begin()) {
    auto prev = std::prev(it);
    if (range_end(prev->first, prev->second.size) > ptr) return prev;
  }
  return it;
}

}  // namespace

bool vmm_created(CUmemGenericAllocationHandle handle, unsigned gpu, std::uint64_t bytes) noexcept {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  try {
    auto physical =
        std::make_unique<Physical>(Physical{bytes, static_cast<std::uint8_t>(gpu), 1, 0});
    auto [it, fresh] = t.handles.try_emplace(handle);
    if (!fresh) {
      // A release the shim never saw (a path it does not hook): what that
      // record holds stays charged rather than being guessed away.
      log().warn("cuMemCreate returned handle {:#x}, which the shim still counts as live", handle);
    }
    it->second = HandleRef{physical.release(), 1};
    return true;
  } catch (...) {
    return false;
  }
}

CUresult vmm_release(const AllocationState& st, CUmemGenericAllocationHandle handle) noexcept {
  const RealDriver& r = real();
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  const CUresult rc = r.cuMemRelease(handle);
  if (rc != CUDA_SUCCESS) return rc;
  auto it = t.handles.find(handle);
  if (it == t.handles.end()) return rc;  // not charged: imported
  Physical* p = it->second.physical;
  if (--it->second.refs == 0) t.handles.erase(it);
  --p->refs;
  settle(st, p);  // still mapped: charged until the last cuMemUnmap
  return rc;
}

CUresult vmm_map(const AllocationState& st, CUdeviceptr ptr, std::size_t size, std::size_t offset,
                 CUmemGenericAllocationHandle handle, unsigned long long flags) noexcept {
  const RealDriver& r = real();
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  const CUresult rc = r.cuMemMap(ptr, size, offset, handle, flags);
  if (rc != CUDA_SUCCESS) return rc;
  auto ref = t.handles.find(handle);
  Physical* p = ref == t.handles.end() ? nullptr : ref->second.physical;
  if (p) ++p->mappings;  // counted first: a mapping we cannot record stays charged
  // The driver mapped [ptr, ptr + size), so nothing recorded there is still mapped.
  const CUdeviceptr end = range_end(ptr, size);
  for (auto it = first_overlapping(t, ptr); it != t.mappings.end() && it->first < end;)
    it = forget_mapping(st, t, it);
  if (!p) return rc;
  try {
    t.mappings.emplace(ptr, Mapping{size, p});
  } catch (...) {
  }
  return rc;
}

CUresult vmm_unmap(const AllocationState& st, CUdeviceptr ptr, std::size_t size) noexcept {
  const RealDriver& r = real();
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  const CUresult rc = r.cuMemUnmap(ptr, size);
  if (rc != CUDA_SUCCESS) return rc;
  // The range is one or more whole mappings (the driver refuses a part of
  // one). A recorded mapping reaching outside it is kept: over-counting is
  // the safe side if a driver ever unmapped less than the range.
  const CUdeviceptr end = range_end(ptr, size);
  for (auto it = t.mappings.lower_bound(ptr);
       it != t.mappings.end() && range_end(it->first, it->second.size) <= end;)
    it = forget_mapping(st, t, it);
  return rc;
}

CUresult vmm_retain(CUmemGenericAllocationHandle* handle, void* addr) noexcept {
  const RealDriver& r = real();
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  const CUresult rc = r.cuMemRetainAllocationHandle(handle, addr);
  if (rc != CUDA_SUCCESS || !handle) return rc;
  const auto a = reinterpret_cast<CUdeviceptr>(addr);
  auto it = t.mappings.upper_bound(a);
  if (it == t.mappings.begin()) return rc;
  --it;
  if (a >= range_end(it->first, it->second.size)) return rc;  // not memory the shim charged
  Physical* p = it->second.physical;
  ++p->refs;  // counted first: a reference we cannot record stays charged
  try {
    HandleRef& ref = t.handles[*handle];
    if (ref.physical && ref.physical != p) {
      log().warn(
          "cuMemRetainAllocationHandle returned handle {:#x} for another allocation than "
          "the one mapped at {}; both stay charged",
          *handle, addr);
      return rc;
    }
    ref.physical = p;
    ++ref.refs;
  } catch (...) {
  }
  return rc;
}

CUresult vmm_export(void* shareable, CUmemGenericAllocationHandle handle,
                    CUmemAllocationHandleType type, unsigned long long flags) noexcept {
  const RealDriver& r = real();
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  const CUresult rc = r.cuMemExportToShareableHandle(shareable, handle, type, flags);
  if (rc != CUDA_SUCCESS) return rc;
  auto it = t.handles.find(handle);
  if (it == t.handles.end() || it->second.physical->exported) return rc;
  Physical* p = it->second.physical;
  p->exported = true;
  ++p->refs;  // never undone: the charge outlives every release and unmap here
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    log().info("an exported allocation stays charged until this process exits");
  return rc;
}

CUresult vmm_map_array(CUarrayMapInfo* list, unsigned count, CUstream stream,
                       bool per_thread) noexcept {
  const RealDriver& r = real();
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  const CUresult rc = per_thread ? r.cuMemMapArrayAsync_ptsz(list, count, stream)
                                 : r.cuMemMapArrayAsync(list, count, stream);
  if (rc != CUDA_SUCCESS || !list) return rc;
  for (unsigned i = 0; i < count; ++i) {
    const CUarrayMapInfo& info = list[i];
    if (info.memOperationType != CU_MEM_OPERATION_TYPE_MAP ||
        info.memHandleType != CU_MEM_HANDLE_TYPE_GENERIC)
      continue;
    auto ref = t.handles.find(info.memHandle.memHandle);
    if (ref == t.handles.end()) continue;
    ++ref->second.physical->mappings;  // never undone: see the header
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      log().info("an allocation mapped into a sparse array stays charged until this process exits");
  }
  return rc;
}

void vmm_reset_after_fork() noexcept {
  // Rebuilt in place, never walked: a thread of the parent may have been
  // changing them at fork. The parent's few records are left behind.
  Tables& t = tables();
  new (&t.mu) std::mutex;
  new (&t.handles) decltype(t.handles);
  new (&t.mappings) decltype(t.mappings);
}

}  // namespace cushare::shim
