// Small queries and hints frameworks call routinely: peer access (never
// available between simulated devices), managed-memory prefetch/advice
// (accepted, no effect), stream attributes.
#include "tests/fakegpu/cuda/driver.hpp"

using namespace fakegpu;

namespace {
bool valid_device(CUdevice d) {
  return valid_ordinal(d);
}

CUresult managed_range(CUdeviceptr ptr, size_t count) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> guard(driver().mu);
  Region* r = find_region(ptr, count);
  return r && r->kind == RegionKind::managed ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
}  // namespace

FAKEGPU_API CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev) || !valid_device(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
  *canAccessPeer = 0;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib,
                                             CUdevice srcDevice, CUdevice dstDevice) {
  (void)attrib;
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (value == nullptr || srcDevice == dstDevice) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(srcDevice) || !valid_device(dstDevice)) return CUDA_ERROR_INVALID_DEVICE;
  *value = 0;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (as_context(peerContext) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
}

FAKEGPU_API CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                        CUstream hStream) {
  (void)dstDevice, (void)hStream;
  return managed_range(devPtr, count);
}
FAKEGPU_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                             CUstream hStream) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return cuMemPrefetchAsync(devPtr, count, dstDevice, hStream);
}
FAKEGPU_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                           unsigned int flags, CUstream hStream) {
  (void)location, (void)flags, (void)hStream;
  return managed_range(devPtr, count);
}
FAKEGPU_API CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
                                                CUmemLocation location, unsigned int flags,
                                                CUstream hStream) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return cuMemPrefetchAsync_v2(devPtr, count, location, flags, hStream);
}
FAKEGPU_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                 CUdevice device) {
  (void)advice, (void)device;
  return managed_range(devPtr, count);
}
FAKEGPU_API CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                    CUmemLocation location) {
  (void)advice, (void)location;
  return managed_range(devPtr, count);
}

FAKEGPU_API CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream_object(hStream, &s); r != CUDA_SUCCESS) return r;
  if (pCtx) *pCtx = reinterpret_cast<CUcontext>(s->ctx);
  if (pGreenCtx) *pGreenCtx = nullptr;
  return CUDA_SUCCESS;
}
FAKEGPU_API CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext* pCtx,
                                            CUgreenCtx* pGreenCtx) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return cuStreamGetCtx_v2(hStream, pCtx, pGreenCtx);
}

FAKEGPU_API CUresult cuCtxResetPersistingL2Cache(void) {
  return check_ready();
}
