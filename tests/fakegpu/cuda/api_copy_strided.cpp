// cuMemcpy2D and cuMemcpy3D with their unaligned, async and per-thread forms:
// strided copies between host memory, device memory and CUDA arrays.
#include "tests/fakegpu/cuda/copy_strided.hpp"

using namespace fakegpu;

namespace {

CopyEnd end_of(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, uint64_t x,
               uint64_t y, uint64_t z, uint64_t pitch, uint64_t height) {
  const uint64_t address = type == CU_MEMORYTYPE_HOST ? reinterpret_cast<uint64_t>(host) : device;
  return {.type = type,
          .address = address,
          .array = array,
          .x_bytes = x,
          .y = y,
          .z = z,
          .pitch = pitch,
          .height = height};
}

// A malformed request still reports a missing context or a bad stream first.
CUresult invalid(CUstream stream) {
  Stream* s = nullptr;
  if (CUresult r = transfer_stream(stream, &s); r != CUDA_SUCCESS) return r;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult run_copy(CUstream stream, const CopyEnd& src, const CopyEnd& dst, const CopyExtent& extent,
                  bool sync) {
  Stream* s = nullptr;
  if (CUresult r = transfer_stream(stream, &s); r != CUDA_SUCCESS) return r;
  uint64_t bytes = 0;
  bool device_local = false;
  if (CUresult r = copy_strided(src, dst, extent, &bytes, &device_local); r != CUDA_SUCCESS)
    return r;
  return run_transfer(s, bytes, device_local, sync);
}

CUresult copy2d(const CUDA_MEMCPY2D* p, CUstream stream, bool sync) {
  if (p == nullptr) return invalid(stream);
  return run_copy(stream,
                  end_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
                         p->srcY, 0, p->srcPitch, 0),
                  end_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
                         p->dstY, 0, p->dstPitch, 0),
                  {p->WidthInBytes, p->Height, 1}, sync);
}

CUresult copy3d(const CUDA_MEMCPY3D* p, CUstream stream, bool sync) {
  // Mipmap levels and the reserved members must be 0, as cuda.h documents.
  if (p == nullptr || p->srcLOD || p->dstLOD || p->reserved0 || p->reserved1)
    return invalid(stream);
  return run_copy(stream,
                  end_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
                         p->srcY, p->srcZ, p->srcPitch, p->srcHeight),
                  end_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
                         p->dstY, p->dstZ, p->dstPitch, p->dstHeight),
                  {p->WidthInBytes, p->Height, p->Depth}, sync);
}

}  // namespace

// cuMemcpy2DUnaligned lifts a restriction on intra-device pitches that
// fakegpu does not impose, so both copy alike.
FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemcpy2D_v2, (const CUDA_MEMCPY2D* pCopy),
                      copy2d(pCopy, nullptr, true))
FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D* pCopy),
                      copy2d(pCopy, nullptr, true))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D* pCopy, CUstream hStream),
                       copy2d(pCopy, hStream, false))
FAKEGPU_SYNC_AND_PTDS(CUresult, cuMemcpy3D_v2, (const CUDA_MEMCPY3D* pCopy),
                      copy3d(pCopy, nullptr, true))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D* pCopy, CUstream hStream),
                       copy3d(pCopy, hStream, false))
