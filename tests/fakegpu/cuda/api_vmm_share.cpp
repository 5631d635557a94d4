// Sharing VMM allocations between processes through POSIX file descriptors
// (cuMemExportToShareableHandle / cuMemImportFromShareableHandle).
//
// The descriptor is a memfd made at the first export and duplicated for each
// export: its inode names the allocation in the node's table
// (shared_allocations.hpp), and its pages hold the allocation's bytes, so the
// importer reads what the exporter wrote. The device is charged once, at
// cuMemCreate; an import holds the memory without charging it again.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "tests/fakegpu/core/shared_allocations.hpp"
#include "tests/fakegpu/cuda/driver.hpp"
#include "tests/fakegpu/cuda/vmm_physical.hpp"

using namespace fakegpu;

namespace {

// Maps the memfd as the allocation's bytes while the process's
// FAKEGPU_HOST_BACKING lasts (else writes vanish, as for any device memory
// beyond it). Caller holds driver().mu.
void back_with_file(Backing& b, int fd) {
  Driver& d = driver();
  if (b.unbacked || d.backed_bytes + (b.lazy ? 0 : b.size) > d.config.host_backing_limit) {
    b.unbacked = true;
    return;
  }
  void* p = mmap(nullptr, b.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    b.unbacked = true;
    return;
  }
  const uint64_t size = b.size;
  b.shared.reset(static_cast<uint8_t*>(p), [size](uint8_t* q) { munmap(q, size); });
  b.host = b.shared.get();
  if (b.lazy) {
    std::memcpy(b.host, b.lazy.get(), b.size);  // what was written before the export
    b.lazy.reset();
  } else {
    d.backed_bytes += b.size;
  }
}

bool file_identity(int fd, struct stat* st) {
  return fd >= 0 && fstat(fd, st) == 0;
}

// Makes `h` shareable: its memfd and its entry in the node's table. Caller
// holds driver().mu (the state file is locked inside it, never the reverse).
CUresult publish(PhysicalHandle* h) {
  const int fd = memfd_create("fakegpu-vmm", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  struct stat st {};
  if (ftruncate(fd, static_cast<off_t>(h->size)) != 0 || !file_identity(fd, &st)) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Driver& d = driver();
  int32_t slot;
  {
    StateLock lock(*d.file);
    slot = publish_shared(lock.state(), d.proc, static_cast<uint32_t>(h->device), h->charged,
                          h->prop.requestedHandleTypes, st.st_dev, st.st_ino);
  }
  if (slot < 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  h->shared_slot = slot;
  h->memfd = fd;
  h->charged = 0;  // the shared entry holds the charge from now on
  back_with_file(*h->backing, fd);
  remember_shared(slot, h);
  return CUDA_SUCCESS;
}

// A new handle of this process for shared entry `slot` (already held).
PhysicalHandle* imported(int32_t slot, const SharedAllocation& a, int fd) {
  auto* h = new PhysicalHandle();
  h->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  h->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  h->prop.location.id = ordinal_of(static_cast<int>(a.device));
  h->prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(a.handle_types);
  h->size = a.bytes;
  h->device = static_cast<int>(a.device);
  h->shared_slot = slot;
  h->memfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  h->backing = std::make_shared<Backing>();
  h->backing->size = a.bytes;
  if (h->memfd >= 0) back_with_file(*h->backing, h->memfd);
  register_handle(h, HandleKind::vmm_allocation);
  remember_shared(slot, h);
  return h;
}

}  // namespace

FAKEGPU_API CUresult cuMemExportToShareableHandle(void* shareableHandle,
                                                  CUmemGenericAllocationHandle handle,
                                                  CUmemAllocationHandleType handleType,
                                                  unsigned long long flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (shareableHandle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  PhysicalHandle* h = as_physical(handle);
  if (h == nullptr || h->refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  // Only a type requested at cuMemCreate can be exported (cuMemCreate
  // refuses every type but file descriptors on Linux).
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      !(h->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return CUDA_ERROR_INVALID_VALUE;
  if (h->shared_slot < 0) {
    if (CUresult r = publish(h); r != CUDA_SUCCESS) return r;
  }
  // Each export is a new descriptor the caller closes; the allocation does
  // not depend on it (see docs/fakegpu.md).
  const int fd = fcntl(h->memfd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                    void* osHandle,
                                                    CUmemAllocationHandleType shHandleType) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (shHandleType == CU_MEM_HANDLE_TYPE_WIN32 || shHandleType == CU_MEM_HANDLE_TYPE_WIN32_KMT ||
      shHandleType == CU_MEM_HANDLE_TYPE_FABRIC)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (handle == nullptr || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_INVALID_VALUE;
  // The descriptor travels in the pointer's value, as the driver takes it.
  const auto raw = reinterpret_cast<intptr_t>(osHandle);
  struct stat st {};
  if (raw < 0 || raw > INT32_MAX || !file_identity(static_cast<int>(raw), &st))
    return CUDA_ERROR_INVALID_VALUE;
  const int fd = static_cast<int>(raw);
  Driver& d = driver();
  std::lock_guard<std::mutex> guard(d.mu);
  StateLock lock(*d.file);
  SharedState& s = lock.state();
  const int32_t slot = find_shared(s, st.st_dev, st.st_ino);
  if (slot < 0) return CUDA_ERROR_INVALID_VALUE;  // not a descriptor an export made
  const SharedAllocation& a = s.shared[slot];
  if (ordinal_of(static_cast<int>(a.device)) < 0) return CUDA_ERROR_NOT_SUPPORTED;  // not visible
  if (PhysicalHandle* mine = shared_physical(slot)) {
    // Imported (or exported) here before: one more reference to it.
    ++mine->refs;
    *handle = reinterpret_cast<CUmemGenericAllocationHandle>(mine);
    return CUDA_SUCCESS;
  }
  if (!hold_shared(s, slot, d.proc)) return CUDA_ERROR_OUT_OF_MEMORY;
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(imported(slot, a, fd));
  return CUDA_SUCCESS;
}
