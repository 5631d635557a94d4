// Device-memory allocation hooks: cuMemAlloc, pitch, managed and their frees
// (both ABIs). Pattern: reserve in the ledger, forward, roll back on failure,
// record pointer -> charge; frees look the pointer up, forward, and release
// what was charged. Pointers the shim never charged (imports, IPC, external
// and graph memory) pass through untouched.
#include "shim/accounting/allocation_granularity.hpp"
#include "shim/accounting/memory_accounting.hpp"
#include "shim/accounting/memory_quiescence.hpp"
#include "shim/accounting/pool_accounting.hpp"
#include "shim/hooks/decls.hpp"
#include "shim/hooks/support.hpp"

namespace cushare::shim {
namespace {

// Pitch alignment upper bound for the up-front reservation (devices report
// texturePitchAlignment <= 512); the real pitch is charged after the call.
constexpr std::uint64_t kPitchBound = 512;

template <class Ptr, class Call>
CUresult charged_alloc(const AllocationState& st, const char* api, Ptr* dptr,
                       std::uint64_t requested, ChargeKind kind, Call&& call) noexcept {
  const std::uint64_t bytes = charged_size(requested);
  CUdevice dev;
  const unsigned gpu = allocation_gpu_index(st, dev);
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  const MemoryOp op(&st);
  if (!reserve(st, gpu, bytes, api)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    release(st, gpu, bytes);
    return rc;
  }
  if (!device_pointers().insert(static_cast<std::uint64_t>(*dptr),
                                Charge{bytes, static_cast<std::uint8_t>(gpu), kind, 0})) {
    // Could not remember the charge: keep it (fail closed) rather than lose it.
  }
  return rc;
}

template <class Call>
CUresult charged_free(std::uint64_t ptr, Call&& call) noexcept {
  const AllocationState* st = allocation_state();
  if (!st || !ptr) return call();
  const MemoryOp op(st);
  auto charge = device_pointers().take(ptr);
  const CUresult rc = call();
  if (charge) {
    if (rc == CUDA_SUCCESS) {
      release_charge(*st, *charge);
    } else {
      device_pointers().insert(ptr, *charge);
    }
  }
  return rc;
}

// Pitch: reserve an upper bound, then settle on the real pitch x height.
template <class Ptr, class Size, class Call>
CUresult charged_pitch_alloc(const AllocationState& st, const char* api, Ptr* dptr, Size* pitch,
                             std::uint64_t width, std::uint64_t height, Call&& call) noexcept {
  CUdevice dev;
  const unsigned gpu = allocation_gpu_index(st, dev);
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  const std::uint64_t bound = charged_size(saturating_product(
      width > UINT64_MAX - kPitchBound ? UINT64_MAX
                                       : (width + kPitchBound - 1) / kPitchBound * kPitchBound,
      height));
  const MemoryOp op(&st);
  if (!reserve(st, gpu, bound, api)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    release(st, gpu, bound);
    return rc;
  }
  const std::uint64_t actual =
      charged_size(saturating_product(static_cast<std::uint64_t>(*pitch), height));
  if (actual < bound) {
    release(st, gpu, bound - actual);
  } else if (actual > bound && !reserve(st, gpu, actual - bound, api)) {
    real().cuMemFree_v2(static_cast<CUdeviceptr>(*dptr));
    release(st, gpu, bound);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  device_pointers().insert(static_cast<std::uint64_t>(*dptr),
                           Charge{actual, static_cast<std::uint8_t>(gpu), ChargeKind::kDevice, 0});
  return rc;
}

}  // namespace

void release_charge(const AllocationState& st, const Charge& charge) noexcept {
  if (charge.kind == ChargeKind::kAsyncPool) {
    pool_pointer_freed(st, charge);
  } else {
    release(st, charge.gpu, charge.bytes);
  }
}

}  // namespace cushare::shim

using namespace cushare::shim;

extern "C" CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemAlloc_v2)
  CUSHARE_ACCOUNT_OR(r.cuMemAlloc_v2(dptr, bytesize))
  if (!dptr || bytesize == 0) return r.cuMemAlloc_v2(dptr, bytesize);
  return charged_alloc(*st, "cuMemAlloc_v2", dptr, bytesize, ChargeKind::kDevice,
                       [&] { return r.cuMemAlloc_v2(dptr, bytesize); });
}

extern "C" CUresult cuMemAlloc(legacy::DevicePtrV1* dptr, unsigned int bytesize) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemAlloc)
  CUSHARE_ACCOUNT_OR(r.cuMemAlloc(dptr, bytesize))
  if (!dptr || bytesize == 0) return r.cuMemAlloc(dptr, bytesize);
  return charged_alloc(*st, "cuMemAlloc", dptr, bytesize, ChargeKind::kDevice,
                       [&] { return r.cuMemAlloc(dptr, bytesize); });
}

extern "C" CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                       size_t Height, unsigned int ElementSizeBytes) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemAllocPitch_v2)
  CUSHARE_ACCOUNT_OR(r.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes))
  if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0)
    return r.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  return charged_pitch_alloc(*st, "cuMemAllocPitch_v2", dptr, pPitch, WidthInBytes, Height, [&] {
    return r.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  });
}

extern "C" CUresult cuMemAllocPitch(legacy::DevicePtrV1* dptr, unsigned int* pPitch,
                                    unsigned int WidthInBytes, unsigned int Height,
                                    unsigned int ElementSizeBytes) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemAllocPitch)
  CUSHARE_ACCOUNT_OR(r.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes))
  if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0)
    return r.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  return charged_pitch_alloc(*st, "cuMemAllocPitch", dptr, pPitch, WidthInBytes, Height, [&] {
    return r.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  });
}

extern "C" CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemAllocManaged)
  CUSHARE_ACCOUNT_OR(r.cuMemAllocManaged(dptr, bytesize, flags))
  if (!dptr || bytesize == 0) return r.cuMemAllocManaged(dptr, bytesize, flags);
  // Managed memory becomes resident on touch; not charging it would let a
  // tenant oversubscribe the card through it, so it counts in full.
  return charged_alloc(*st, "cuMemAllocManaged", dptr, bytesize, ChargeKind::kManaged,
                       [&] { return r.cuMemAllocManaged(dptr, bytesize, flags); });
}

extern "C" CUresult cuMemFree_v2(CUdeviceptr dptr) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemFree_v2)
  return charged_free(dptr, [&] { return r.cuMemFree_v2(dptr); });
}

extern "C" CUresult cuMemFree(legacy::DevicePtrV1 dptr) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemFree)
  return charged_free(dptr, [&] { return r.cuMemFree(dptr); });
}
