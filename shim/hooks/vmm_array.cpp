// Virtual memory management (cuMemCreate, cuMemRelease, cuMemMap,
// cuMemUnmap, cuMemRetainAllocationHandle, cuMemMapArrayAsync) and CUDA
// arrays.
//  - cuMemCreate is charged only for device locations, on the device named
//    by prop->location.id (never the current context's). The charge stays
//    until the allocation is both released and unmapped
//    (vmm_accounting.hpp). Imports (cuMemImportFromShareableHandle) are not
//    charged (the exporter's allocation is), so the import is not hooked and
//    their release and mappings pass through; a retained handle is one more
//    reference to an allocation that is already charged. An exported one
//    stays charged until the process exits.
//  - Arrays reserve an estimate from the descriptor (its texel bytes on
//    whole 2 MiB pages), then settle on the driver's own figure (cuArrayGetMemoryRequirements /
//    cuMipmappedArrayGetMemoryRequirements).
#include "shim/accounting/context_overhead.hpp"
#include "shim/accounting/memory_accounting.hpp"
#include "shim/accounting/memory_quiescence.hpp"
#include "shim/accounting/vmm_accounting.hpp"
#include "shim/hooks/decls.hpp"
#include "shim/hooks/support.hpp"

namespace cushare::shim {
namespace {

// The estimate must not be below what the array takes, or the device holds
// more than the quota between the creation and the settle (the settle then
// refuses, but too late). Arrays live in opaque tiled layouts on whole 2 MiB
// pages: the texel bytes rounded up to a page. A layout padded further still
// (a narrow array's tiles) is over for that moment: the known gap.
constexpr std::uint64_t kArrayRounding = 2ull << 20;

std::uint64_t element_bytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
    default:  // packed/compressed formats too: the driver's figure settles it
      return 4;
  }
}

std::uint64_t array_estimate(std::uint64_t w, std::uint64_t h, std::uint64_t d, CUarray_format f,
                             unsigned channels) {
  const std::uint64_t raw =
      w * (h ? h : 1) * (d ? d : 1) * (channels ? channels : 1) * element_bytes(f);
  return (raw + kArrayRounding - 1) / kArrayRounding * kArrayRounding;
}

// Reserve `estimate`, create, settle on the real size. `create()` makes the
// array, `real_size(size&)` asks the driver, `destroy()` undoes.
template <class Handle, class Create, class Size, class Destroy>
CUresult charged_array(const AllocationState& st, const char* api, Handle* handle,
                       std::uint64_t estimate, Create&& create, Size&& real_size,
                       Destroy&& destroy) noexcept {
  CUdevice dev;
  const unsigned gpu = allocation_gpu_index(st, dev);
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  const MemoryOp op(&st);
  if (!reserve(st, gpu, estimate, api)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = create();
  if (rc != CUDA_SUCCESS) {
    release(st, gpu, estimate);
    return rc;
  }
  std::uint64_t actual = estimate;
  if (std::uint64_t size = 0; real_size(dev, size) && size) actual = size;
  if (actual < estimate) {
    release(st, gpu, estimate - actual);
  } else if (actual > estimate && !reserve(st, gpu, actual - estimate, api)) {
    destroy();
    release(st, gpu, estimate);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  array_handles().insert(reinterpret_cast<std::uint64_t>(*handle),
                         Charge{actual, static_cast<std::uint8_t>(gpu), ChargeKind::kArray, 0});
  return rc;
}

bool array_size(CUarray arr, CUdevice dev, std::uint64_t& size) {
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  const RealDriver& r = real();
  if (!r.cuArrayGetMemoryRequirements ||
      r.cuArrayGetMemoryRequirements(&req, arr, dev) != CUDA_SUCCESS)
    return false;
  size = req.size;
  return true;
}

template <class Call>
CUresult charged_destroy(std::uint64_t key, Call&& call) {
  const AllocationState* st = allocation_state();
  if (!st) return call();
  const MemoryOp op(st);
  auto charge = array_handles().take(key);
  const CUresult rc = call();
  if (charge) {
    if (rc == CUDA_SUCCESS) {
      release(*st, charge->gpu, charge->bytes);
    } else {
      array_handles().insert(key, *charge);
    }
  }
  return rc;
}

}  // namespace
}  // namespace cushare::shim

using namespace cushare::shim;

extern "C" CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                const CUmemAllocationProp* prop, unsigned long long flags) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemCreate)
  CUSHARE_ACCOUNT_OR(r.cuMemCreate(handle, size, prop, flags))
  if (!handle || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return r.cuMemCreate(handle, size, prop, flags);
  const unsigned gpu = gpu_index_of_device(*st, prop->location.id);
  note_device_use(*st, prop->location.id);
  const MemoryOp op(st);
  if (!reserve(*st, gpu, size, "cuMemCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = r.cuMemCreate(handle, size, prop, flags);
  if (rc != CUDA_SUCCESS) {
    release(*st, gpu, size);
    return rc;
  }
  if (!vmm_created(*handle, gpu, size)) {
    r.cuMemRelease(*handle);  // untracked memory would escape the quota
    release(*st, gpu, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return rc;
}

extern "C" CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemRelease)
  const AllocationState* st = allocation_state();
  if (!st) return r.cuMemRelease(handle);
  const MemoryOp op(st);
  return vmm_release(*st, handle);
}

extern "C" CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                             CUmemGenericAllocationHandle handle, unsigned long long flags) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemMap)
  const AllocationState* st = allocation_state();
  if (!st) return r.cuMemMap(ptr, size, offset, handle, flags);
  const MemoryOp op(st);
  return vmm_map(*st, ptr, size, offset, handle, flags);
}

extern "C" CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemUnmap)
  const AllocationState* st = allocation_state();
  if (!st) return r.cuMemUnmap(ptr, size);
  const MemoryOp op(st);
  return vmm_unmap(*st, ptr, size);
}

extern "C" CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemRetainAllocationHandle)
  if (!allocation_state()) return r.cuMemRetainAllocationHandle(handle, addr);
  return vmm_retain(handle, addr);
}

extern "C" CUresult cuMemExportToShareableHandle(void* shareableHandle,
                                                 CUmemGenericAllocationHandle handle,
                                                 CUmemAllocationHandleType handleType,
                                                 unsigned long long flags) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemExportToShareableHandle)
  if (!allocation_state())
    return r.cuMemExportToShareableHandle(shareableHandle, handle, handleType, flags);
  return vmm_export(shareableHandle, handle, handleType, flags);
}

extern "C" CUresult cuMemMapArrayAsync(CUarrayMapInfo* mapInfoList, unsigned int count,
                                       CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemMapArrayAsync)
  if (!allocation_state()) return r.cuMemMapArrayAsync(mapInfoList, count, hStream);
  return vmm_map_array(mapInfoList, count, hStream, false);
}

extern "C" CUresult cuMemMapArrayAsync_ptsz(CUarrayMapInfo* mapInfoList, unsigned int count,
                                            CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemMapArrayAsync_ptsz)
  if (!allocation_state()) return r.cuMemMapArrayAsync_ptsz(mapInfoList, count, hStream);
  return vmm_map_array(mapInfoList, count, hStream, true);
}

extern "C" CUresult cuArrayCreate_v2(CUarray* pHandle,
                                     const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuArrayCreate_v2)
  CUSHARE_ACCOUNT_OR(r.cuArrayCreate_v2(pHandle, pAllocateArray))
  if (!pHandle || !pAllocateArray) return r.cuArrayCreate_v2(pHandle, pAllocateArray);
  return charged_array(
      *st, "cuArrayCreate_v2", pHandle,
      array_estimate(pAllocateArray->Width, pAllocateArray->Height, 1, pAllocateArray->Format,
                     pAllocateArray->NumChannels),
      [&] { return r.cuArrayCreate_v2(pHandle, pAllocateArray); },
      [&](CUdevice dev, std::uint64_t& size) { return array_size(*pHandle, dev, size); },
      [&] { r.cuArrayDestroy(*pHandle); });
}

extern "C" CUresult cuArrayCreate(CUarray* pHandle,
                                  const legacy::ArrayDescriptorV1* pAllocateArray) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuArrayCreate)
  CUSHARE_ACCOUNT_OR(r.cuArrayCreate(pHandle, pAllocateArray))
  if (!pHandle || !pAllocateArray) return r.cuArrayCreate(pHandle, pAllocateArray);
  return charged_array(
      *st, "cuArrayCreate", pHandle,
      array_estimate(pAllocateArray->Width, pAllocateArray->Height, 1, pAllocateArray->Format,
                     pAllocateArray->NumChannels),
      [&] { return r.cuArrayCreate(pHandle, pAllocateArray); },
      [&](CUdevice dev, std::uint64_t& size) { return array_size(*pHandle, dev, size); },
      [&] { r.cuArrayDestroy(*pHandle); });
}

extern "C" CUresult cuArray3DCreate_v2(CUarray* pHandle,
                                       const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuArray3DCreate_v2)
  CUSHARE_ACCOUNT_OR(r.cuArray3DCreate_v2(pHandle, pAllocateArray))
  if (!pHandle || !pAllocateArray) return r.cuArray3DCreate_v2(pHandle, pAllocateArray);
  return charged_array(
      *st, "cuArray3DCreate_v2", pHandle,
      array_estimate(pAllocateArray->Width, pAllocateArray->Height, pAllocateArray->Depth,
                     pAllocateArray->Format, pAllocateArray->NumChannels),
      [&] { return r.cuArray3DCreate_v2(pHandle, pAllocateArray); },
      [&](CUdevice dev, std::uint64_t& size) { return array_size(*pHandle, dev, size); },
      [&] { r.cuArrayDestroy(*pHandle); });
}

extern "C" CUresult cuArray3DCreate(CUarray* pHandle,
                                    const legacy::Array3DDescriptorV1* pAllocateArray) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuArray3DCreate)
  CUSHARE_ACCOUNT_OR(r.cuArray3DCreate(pHandle, pAllocateArray))
  if (!pHandle || !pAllocateArray) return r.cuArray3DCreate(pHandle, pAllocateArray);
  return charged_array(
      *st, "cuArray3DCreate", pHandle,
      array_estimate(pAllocateArray->Width, pAllocateArray->Height, pAllocateArray->Depth,
                     pAllocateArray->Format, pAllocateArray->NumChannels),
      [&] { return r.cuArray3DCreate(pHandle, pAllocateArray); },
      [&](CUdevice dev, std::uint64_t& size) { return array_size(*pHandle, dev, size); },
      [&] { r.cuArrayDestroy(*pHandle); });
}

extern "C" CUresult cuArrayDestroy(CUarray hArray) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuArrayDestroy)
  return charged_destroy(reinterpret_cast<std::uint64_t>(hArray),
                         [&] { return r.cuArrayDestroy(hArray); });
}

extern "C" CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                                           const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                           unsigned int numMipmapLevels) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMipmappedArrayCreate)
  CUSHARE_ACCOUNT_OR(r.cuMipmappedArrayCreate(pHandle, pMipmappedArrayDesc, numMipmapLevels))
  if (!pHandle || !pMipmappedArrayDesc)
    return r.cuMipmappedArrayCreate(pHandle, pMipmappedArrayDesc, numMipmapLevels);
  // All levels together stay below twice the base level.
  const std::uint64_t estimate =
      2 * array_estimate(pMipmappedArrayDesc->Width, pMipmappedArrayDesc->Height,
                         pMipmappedArrayDesc->Depth, pMipmappedArrayDesc->Format,
                         pMipmappedArrayDesc->NumChannels);
  return charged_array(
      *st, "cuMipmappedArrayCreate", pHandle, estimate,
      [&] { return r.cuMipmappedArrayCreate(pHandle, pMipmappedArrayDesc, numMipmapLevels); },
      [&](CUdevice dev, std::uint64_t& size) {
        CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
        if (!r.cuMipmappedArrayGetMemoryRequirements ||
            r.cuMipmappedArrayGetMemoryRequirements(&req, *pHandle, dev) != CUDA_SUCCESS)
          return false;
        size = req.size;
        return true;
      },
      [&] { r.cuMipmappedArrayDestroy(*pHandle); });
}

extern "C" CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMipmappedArrayDestroy)
  return charged_destroy(reinterpret_cast<std::uint64_t>(hMipmappedArray),
                         [&] { return r.cuMipmappedArrayDestroy(hMipmappedArray); });
}
