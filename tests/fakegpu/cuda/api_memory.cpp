// Device, pitched, managed, host and array memory; copies and memsets; IPC.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "tests/fakegpu/cuda/array_object.hpp"
#include "tests/fakegpu/cuda/array_shape.hpp"
#include "tests/fakegpu/cuda/driver.hpp"
#include "tests/fakegpu/cuda/size_math.hpp"

using namespace fakegpu;

namespace {

constexpr uint64_t kAlign = 512;
constexpr uint64_t kLargePage = 2ull << 20;

// What an allocation of at most kMaxAllocationBytes takes from the device:
// 512-byte blocks below 2 MiB (the sub-allocator packs them into shared
// pages), whole 2 MiB pages from there on, as the driver's allocator does.
uint64_t device_footprint(uint64_t size) {
  uint64_t bytes = 0;
  (void)round_up(size, size >= kLargePage ? kLargePage : kAlign, &bytes);  // cannot wrap
  return bytes;
}

// Reserves addresses, charges the device and records the region.
CUresult allocate_region(uint64_t size, RegionKind kind, const Context* owner, CUdeviceptr* out,
                         uint64_t alignment = kAlign) {
  const int device = owner->device;
  if (size == 0 || size > kMaxAllocationBytes)
    return size == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t charged = device_footprint(size);
  if (CUresult r = charge_device(device, charged); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  std::unique_lock<std::mutex> guard(d.mu);
  const uint64_t base =
      va_alloc(size, std::max<uint64_t>(alignment, size >= (2ull << 20) ? (2ull << 20) : kAlign));
  if (base == 0) {
    guard.unlock();
    uncharge_device(device, charged);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Region r;
  r.size = size;
  r.kind = kind;
  r.device = device;
  r.charged = charged;
  r.owner = owner;
  r.backing = std::make_shared<Backing>();
  r.backing->size = size;
  d.regions[base] = std::move(r);
  *out = base;
  return CUDA_SUCCESS;
}

// Frees a region of one of `kinds`; returns INVALID_VALUE for unknown pointers.
CUresult free_region(uint64_t base, std::initializer_list<RegionKind> kinds) {
  Driver& d = driver();
  Region victim;
  {
    std::lock_guard<std::mutex> guard(d.mu);
    auto it = d.regions.find(base);
    if (it == d.regions.end() ||
        std::find(kinds.begin(), kinds.end(), it->second.kind) == kinds.end()) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    victim = std::move(it->second);
    d.regions.erase(it);
    if (victim.owns_va) va_release(base, victim.size);
    if (victim.backing && victim.backing->lazy && victim.backing.use_count() == 1) {
      d.backed_bytes -= std::min(d.backed_bytes, victim.backing->size);
    }
  }
  if (victim.mapped_host && victim.backing && victim.backing->host)
    munmap(victim.backing->host, victim.size);
  if (victim.charged) uncharge_device(victim.device, victim.charged);
  if (victim.kind == RegionKind::graph) graph_memory_freed(victim.device, victim.size);
  return CUDA_SUCCESS;
}

}  // namespace

void fakegpu::free_owned_regions(const Context* owner) {
  std::vector<uint64_t> bases;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    for (const auto& [base, region] : driver().regions) {
      if (region.owner == owner) bases.push_back(base);
    }
  }
  for (uint64_t base : bases)
    (void)free_region(base, {RegionKind::device, RegionKind::pitch, RegionKind::managed});
}

CUresult fakegpu::transfer_stream(CUstream stream, Stream** out) {
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  return resolve_stream(stream, out);
}

CUresult fakegpu::run_transfer(Stream* s, uint64_t bytes, bool device_local, bool sync) {
  const uint64_t ns = copy_duration_ns(bytes, device_local);
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    if (!sync) return capture_kernel(s, ns);
    invalidate_capture(s);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  // A synchronous copy waits for the work before it, as a synchronisation.
  if (sync) {
    if (CUresult r = unsafe_call_during_captures(); r != CUDA_SUCCESS) return r;
  }
  uint64_t seq = 0;
  if (CUresult r = submit(s, ItemKind::copy, ns, -1, 0, &seq); r != CUDA_SUCCESS) return r;
  return sync ? wait_for(s->ctx, seq, s) : CUDA_SUCCESS;
}

namespace {

bool is_device(uint64_t addr) {
  Driver& d = driver();
  std::lock_guard<std::mutex> guard(d.mu);
  Region* r = find_region(addr, 1);
  return r && r->kind != RegionKind::host && r->kind != RegionKind::managed;
}

CUresult memcpy_generic(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, bool sync) {
  Stream* s = nullptr;
  if (CUresult r = transfer_stream(stream, &s); r != CUDA_SUCCESS) return r;
  const bool dd = is_device(dst), sd = is_device(src);
  if (CUresult r = copy_bytes(dst, false, src, false, n); r != CUDA_SUCCESS) return r;
  return run_transfer(s, n, dd && sd, sync);
}

CUresult htod(CUdeviceptr dst, const void* src, size_t n, CUstream stream, bool sync) {
  Stream* s = nullptr;
  if (CUresult r = transfer_stream(stream, &s); r != CUDA_SUCCESS) return r;
  if (src == nullptr && n) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = copy_bytes(dst, true, reinterpret_cast<uint64_t>(src), false, n);
      r != CUDA_SUCCESS)
    return r;
  return run_transfer(s, n, false, sync);
}

CUresult dtoh(void* dst, CUdeviceptr src, size_t n, CUstream stream, bool sync) {
  Stream* s = nullptr;
  if (CUresult r = transfer_stream(stream, &s); r != CUDA_SUCCESS) return r;
  if (dst == nullptr && n) return CUDA_ERROR_INVALID_VALUE;
  // The bytes are what the device holds once earlier work on the stream ran;
  // fakegpu moves data at call time, so synchronous reads first wait.
  if (CUresult r = copy_bytes(reinterpret_cast<uint64_t>(dst), false, src, true, n);
      r != CUDA_SUCCESS)
    return r;
  return run_transfer(s, n, false, sync);
}

CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, bool sync) {
  Stream* s = nullptr;
  if (CUresult r = transfer_stream(stream, &s); r != CUDA_SUCCESS) return r;
  if (CUresult r = copy_bytes(dst, true, src, true, n); r != CUDA_SUCCESS) return r;
  return run_transfer(s, n, true, sync);
}

CUresult memset_any(CUdeviceptr dst, uint64_t esize, uint64_t value, uint64_t count, uint64_t pitch,
                    uint64_t width, uint64_t height, CUstream stream, bool sync) {
  Stream* s = nullptr;
  if (CUresult r = transfer_stream(stream, &s); r != CUDA_SUCCESS) return r;
  // The bytes written, for the transfer time; they must fit like the span.
  uint64_t bytes = 0;
  const bool fits = height ? mul_size(width, esize, &bytes) && mul_size(bytes, height, &bytes)
                           : mul_size(count, esize, &bytes);
  if (!fits) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = fill_bytes(dst, esize, value, count, pitch, width, height); r != CUDA_SUCCESS)
    return r;
  return run_transfer(s, bytes, true, sync);
}

// Arrays live in opaque, tiled layouts: they are charged their texel bytes
// rounded up to 2 MiB pages. The shape checks bound the texel bytes far below
// where rounding could wrap.
uint64_t array_pages(uint64_t texel_bytes) {
  uint64_t bytes = 0;
  (void)round_up(texel_bytes, kLargePage, &bytes);
  return bytes;
}

CUresult create_array(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t texels = 0;
  if (CUresult r = array_bytes(desc, &texels); r != CUDA_SUCCESS) return r;
  const uint64_t bytes = array_pages(texels);
  if (CUresult r = charge_device(c->device, bytes); r != CUDA_SUCCESS) return r;
  auto* a = new ArrayObject();
  a->desc = desc;
  a->bytes = bytes;
  a->device = c->device;
  a->texels.size = texels;
  std::lock_guard<std::mutex> guard(driver().mu);
  register_handle(a, HandleKind::array, c);
  *out = reinterpret_cast<CUarray>(a);
  return CUDA_SUCCESS;
}

}  // namespace

// ---- allocation ----

FAKEGPU_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return allocate_region(bytesize, RegionKind::device, c, dptr);
}

FAKEGPU_API CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                        size_t Height, unsigned int ElementSizeBytes) {
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0 ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Texture pitch alignment of current GPUs. A pitch or total that does not
  // fit in 64 bits is an impossible allocation.
  uint64_t pitch = 0, total = 0;
  if (!round_up(WidthInBytes, 512, &pitch) || !mul_size(pitch, Height, &total))
    return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = allocate_region(total, RegionKind::pitch, c, dptr); r != CUDA_SUCCESS) return r;
  *pPitch = pitch;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytesize == 0 ||
      (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Managed memory is host-accessible: back it with lazily committed host pages.
  // It is charged to the device at allocation (resident-on-touch is not modelled).
  if (bytesize > kMaxAllocationBytes) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t charged = device_footprint(bytesize);
  if (CUresult r = charge_device(c->device, charged); r != CUDA_SUCCESS) return r;
  void* p = mmap(nullptr, bytesize, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    uncharge_device(c->device, charged);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Region r;
  r.size = bytesize;
  r.kind = RegionKind::managed;
  r.device = c->device;
  r.charged = charged;
  r.owner = c;
  r.owns_va = false;
  r.mapped_host = true;
  r.backing = std::make_shared<Backing>();
  r.backing->size = bytesize;
  r.backing->host = static_cast<uint8_t*>(p);
  std::lock_guard<std::mutex> guard(driver().mu);
  driver().regions[reinterpret_cast<uint64_t>(p)] = std::move(r);
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (dptr == 0) return CUDA_SUCCESS;
  // cuMemFree synchronises the device like the real driver's implicit sync.
  if (Context* c = current_context(); context_alive(c)) wait_for(c, c->last_seq.load());
  return free_region(dptr, {RegionKind::device, RegionKind::pitch, RegionKind::managed,
                            RegionKind::async, RegionKind::graph});
}

FAKEGPU_API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  StateLock lock(*d.file);
  const DeviceSlot& dev = lock.state().devices[c->device];
  if (free) *free = dev.total_mem - std::min(dev.used_mem, dev.total_mem);
  if (total) *total = dev.total_mem;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> guard(driver().mu);
  uint64_t base = 0;
  Region* r = find_region(dptr, 1, &base);
  if (r == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = base;
  if (psize) *psize = r->size;
  return CUDA_SUCCESS;
}

// ---- host memory (pinned host memory is not device memory) ----

FAKEGPU_API CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  if (pp == nullptr || bytesize == 0 || (Flags & ~0x7u)) return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(nullptr, bytesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Region r;
  r.size = bytesize;
  r.kind = RegionKind::host;
  r.device = c->device;
  r.owns_va = false;
  r.mapped_host = true;
  r.backing = std::make_shared<Backing>();
  r.backing->size = bytesize;
  r.backing->host = static_cast<uint8_t*>(p);
  std::lock_guard<std::mutex> guard(driver().mu);
  driver().regions[reinterpret_cast<uint64_t>(p)] = std::move(r);
  *pp = p;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return cuMemHostAlloc(pp, bytesize, 0);
}

FAKEGPU_API CUresult cuMemFreeHost(void* p) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  return free_region(reinterpret_cast<uint64_t>(p), {RegionKind::host});
}

FAKEGPU_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  Region* r = find_region(reinterpret_cast<uint64_t>(p), 1);
  if (r == nullptr || r->kind != RegionKind::host) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: same address
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> guard(driver().mu);
  if (pFlags == nullptr || find_region(reinterpret_cast<uint64_t>(p), 1) == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  *pFlags = 0;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  (void)Flags;
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (p == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;  // page-locking is not modelled; the memory stays ordinary host memory
}

FAKEGPU_API CUresult cuMemHostUnregister(void* p) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- pointer attributes ----

FAKEGPU_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                           CUdeviceptr ptr) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard<std::mutex> guard(d.mu);
  uint64_t base = 0;
  Region* r = find_region(ptr, 1, &base);
  if (r == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
      const CUdevice ordinal = ordinal_of(r->device);
      const Context* owner = r->owner;
      if (!owner && ordinal >= 0) owner = d.primary[ordinal];
      for (Context* c : d.contexts) {
        if (!owner && c->device == r->device) owner = c;
      }
      *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(const_cast<Context*>(owner));
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) =
          r->kind == RegionKind::host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (r->kind != RegionKind::host && r->kind != RegionKind::managed)
        return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned*>(data) = r->kind == RegionKind::managed;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = ordinal_of(r->device);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = r->size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      *static_cast<unsigned*>(data) = 1;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

FAKEGPU_API CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                            CUpointer_attribute* attributes, void** data,
                                            CUdeviceptr ptr) {
  if (attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < numAttributes; ++i) {
    if (CUresult r = cuPointerGetAttribute(data[i], attributes[i], ptr); r != CUDA_SUCCESS)
      return r;
  }
  return CUDA_SUCCESS;
}

// ---- copies (sync forms wait for completion on the context's default stream) ----
// (Each entry point names its parameters as cuda.h does.)

FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemcpyHtoD_v2,
                      (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount),
                      htod(dstDevice, srcHost, ByteCount, nullptr, true))
FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemcpyDtoH_v2,
                      (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount),
                      dtoh(dstHost, srcDevice, ByteCount, nullptr, true))
FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemcpyDtoD_v2,
                      (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
                      dtod(dstDevice, srcDevice, ByteCount, nullptr, true))
FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount),
                      memcpy_generic(dst, src, ByteCount, nullptr, true))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemcpyHtoDAsync_v2,
                       (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                        CUstream hStream),
                       htod(dstDevice, srcHost, ByteCount, hStream, false))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemcpyDtoHAsync_v2,
                       (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
                       dtoh(dstHost, srcDevice, ByteCount, hStream, false))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemcpyDtoDAsync_v2,
                       (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                        CUstream hStream),
                       dtod(dstDevice, srcDevice, ByteCount, hStream, false))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemcpyAsync,
                       (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),
                       memcpy_generic(dst, src, ByteCount, hStream, false))

// ---- memsets ----

FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemsetD8_v2, (CUdeviceptr dstDevice, unsigned char uc, size_t N),
                      memset_any(dstDevice, 1, uc, N, 0, 0, 0, nullptr, true))
FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemsetD16_v2,
                      (CUdeviceptr dstDevice, unsigned short us, size_t N),
                      memset_any(dstDevice, 2, us, N, 0, 0, 0, nullptr, true))
FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemsetD32_v2, (CUdeviceptr dstDevice, unsigned int ui, size_t N),
                      memset_any(dstDevice, 4, ui, N, 0, 0, 0, nullptr, true))
FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemsetD2D8_v2,
                      (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                       size_t Height),
                      memset_any(dstDevice, 1, uc, 0, dstPitch, Width, Height, nullptr, true))
FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemsetD2D16_v2,
                      (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                       size_t Height),
                      memset_any(dstDevice, 2, us, 0, dstPitch, Width, Height, nullptr, true))
FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemsetD2D32_v2,
                      (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                       size_t Height),
                      memset_any(dstDevice, 4, ui, 0, dstPitch, Width, Height, nullptr, true))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemsetD8Async,
                       (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
                       memset_any(dstDevice, 1, uc, N, 0, 0, 0, hStream, false))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemsetD16Async,
                       (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream),
                       memset_any(dstDevice, 2, us, N, 0, 0, 0, hStream, false))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemsetD32Async,
                       (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
                       memset_any(dstDevice, 4, ui, N, 0, 0, 0, hStream, false))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemsetD2D8Async,
                       (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                        size_t Height, CUstream hStream),
                       memset_any(dstDevice, 1, uc, 0, dstPitch, Width, Height, hStream, false))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemsetD2D16Async,
                       (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                        size_t Height, CUstream hStream),
                       memset_any(dstDevice, 2, us, 0, dstPitch, Width, Height, hStream, false))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemsetD2D32Async,
                       (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                        size_t Height, CUstream hStream),
                       memset_any(dstDevice, 4, ui, 0, dstPitch, Width, Height, hStream, false))

// ---- arrays ----

FAKEGPU_API CUresult cuArrayCreate_v2(CUarray* pHandle,
                                      const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = pAllocateArray->Width;
  desc.Height = pAllocateArray->Height;
  desc.Format = pAllocateArray->Format;
  desc.NumChannels = pAllocateArray->NumChannels;
  return create_array(pHandle, desc);
}

FAKEGPU_API CUresult cuArray3DCreate_v2(CUarray* pHandle,
                                        const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return create_array(pHandle, *pAllocateArray);
}

FAKEGPU_API CUresult cuArrayDestroy(CUarray hArray) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  auto* a = reinterpret_cast<ArrayObject*>(hArray);
  {
    // Readers hold driver().mu from lookup to last use; forgetting the handle
    // under it lets the object go once the lock is released.
    std::lock_guard<std::mutex> guard(driver().mu);
    if (!unregister_handle(a, HandleKind::array)) return CUDA_ERROR_INVALID_HANDLE;
  }
  drop_array(a);
  return CUDA_SUCCESS;
}

void fakegpu::drop_array(void* array) {
  auto* a = static_cast<ArrayObject*>(array);
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    release_backing(a->texels);
  }
  uncharge_device(a->device, a->bytes);
  delete a;
}

FAKEGPU_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* pArrayDescriptor,
                                               CUarray hArray) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> guard(driver().mu);
  auto* a = handle_object<ArrayObject>(hArray, HandleKind::array);
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pArrayDescriptor = a->desc;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* pArrayDescriptor,
                                             CUarray hArray) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  if (CUresult r = cuArray3DGetDescriptor_v2(&d, hArray); r != CUDA_SUCCESS) return r;
  if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  pArrayDescriptor->Width = d.Width;
  pArrayDescriptor->Height = d.Height;
  pArrayDescriptor->Format = d.Format;
  pArrayDescriptor->NumChannels = d.NumChannels;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuArrayGetMemoryRequirements(
    CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements, CUarray array, CUdevice dev) {
  (void)dev;
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> guard(driver().mu);
  auto* a = handle_object<ArrayObject>(array, HandleKind::array);
  if (memoryRequirements == nullptr || a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *memoryRequirements = CUDA_ARRAY_MEMORY_REQUIREMENTS{};
  memoryRequirements->size = a->bytes;
  memoryRequirements->alignment = 2ull << 20;
  return CUDA_SUCCESS;
}

// ---- IPC: an import gets its own address range, is never charged, and does
// not share bytes with the exporter (see docs/fakegpu.md) ----

namespace {
struct IpcPayload {
  uint32_t magic;
  int32_t pid;
  uint64_t base;
  uint64_t size;
  int32_t device;
};
static_assert(sizeof(IpcPayload) <= CU_IPC_HANDLE_SIZE);
}  // namespace

FAKEGPU_API CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  uint64_t base = 0;
  Region* r = find_region(dptr, 1, &base);
  if (r == nullptr || (r->kind != RegionKind::device && r->kind != RegionKind::pitch))
    return CUDA_ERROR_INVALID_VALUE;
  IpcPayload p{0x1CC0FFEE, getpid(), base, r->size, r->device};
  std::memset(pHandle, 0, sizeof *pHandle);
  std::memcpy(pHandle->reserved, &p, sizeof p);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                           unsigned int Flags) {
  (void)Flags;
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  IpcPayload p{};
  std::memcpy(&p, handle.reserved, sizeof p);
  if (pdptr == nullptr || p.magic != 0x1CC0FFEE) return CUDA_ERROR_INVALID_VALUE;
  if (p.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;  // a process cannot open its own handle
  if (process_start_ticks(p.pid) == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard<std::mutex> guard(d.mu);
  const uint64_t base = va_alloc(p.size, 2ull << 20);
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  Region r;
  r.size = p.size;
  r.kind = RegionKind::ipc;
  r.device = p.device;
  r.backing = std::make_shared<Backing>();
  r.backing->size = p.size;
  r.backing->unbacked = true;
  d.regions[base] = std::move(r);
  *pdptr = base;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  return free_region(dptr, {RegionKind::ipc});
}

// ---- mipmapped arrays (charged like arrays: all levels, rounded to 2 MiB) ----

namespace {
struct MipmappedObject {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  unsigned levels = 0;
  uint64_t bytes = 0;
  int device = 0;
};
}  // namespace

FAKEGPU_API CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                                            const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                            unsigned int numMipmapLevels) {
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  if (pHandle == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned levels = numMipmapLevels;
  uint64_t texels = 0;
  if (CUresult r = mipmapped_array_bytes(*desc, &levels, &texels); r != CUDA_SUCCESS) return r;
  const uint64_t bytes = array_pages(texels);
  if (CUresult r = charge_device(c->device, bytes); r != CUDA_SUCCESS) return r;
  auto* m = new MipmappedObject();
  m->desc = *desc;
  m->levels = levels;
  m->bytes = bytes;
  m->device = c->device;
  std::lock_guard<std::mutex> guard(driver().mu);
  register_handle(m, HandleKind::mipmapped_array, c);
  *pHandle = reinterpret_cast<CUmipmappedArray>(m);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  auto* m = reinterpret_cast<MipmappedObject*>(hMipmappedArray);
  {
    std::lock_guard<std::mutex> guard(driver().mu);  // as in cuArrayDestroy
    if (!unregister_handle(m, HandleKind::mipmapped_array)) return CUDA_ERROR_INVALID_HANDLE;
  }
  drop_mipmapped_array(m);
  return CUDA_SUCCESS;
}

void fakegpu::drop_mipmapped_array(void* mipmap) {
  auto* m = static_cast<MipmappedObject*>(mipmap);
  uncharge_device(m->device, m->bytes);
  delete m;
}

FAKEGPU_API CUresult cuMipmappedArrayGetMemoryRequirements(
    CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements, CUmipmappedArray mipmap, CUdevice dev) {
  (void)dev;
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> guard(driver().mu);
  auto* m = handle_object<MipmappedObject>(mipmap, HandleKind::mipmapped_array);
  if (memoryRequirements == nullptr || m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *memoryRequirements = CUDA_ARRAY_MEMORY_REQUIREMENTS{};
  memoryRequirements->size = m->bytes;
  memoryRequirements->alignment = 2ull << 20;
  return CUDA_SUCCESS;
}
