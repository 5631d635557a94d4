// The real driver and NVML entry points, loaded by soname
// (dlopen("libcuda.so.1") / dlopen("libnvidia-ml.so.1"), so cuda-compat
// forward-compatibility libraries are honoured) on first use. Every hook
// forwards through these saved pointers; nothing in the shim calls a cu* or
// nvml* function by name, which would re-enter the shim.
//
// Other shim components (the launch gate) use real() for driver
// calls they make themselves, e.g. real().cuEventRecord(ev, stream).
#pragma once

#include <atomic>
#include <type_traits>

#include "shim/driver/cuda_api.hpp"
#include "shim/driver/nvml_types.hpp"

namespace cushare::shim {

// Driver functions the shim hooks: X(symbol, pointer type). The shim exports
// a wrapper named `symbol`; real().symbol is the driver's implementation.
#define CUSHARE_HOOKED_DRIVER_FUNCTIONS(X)                                                   \
  X(cuInit, PFN_cuInit_v2000)                                                                \
  X(cuGetProcAddress, PFN_cuGetProcAddress_v11030)                                           \
  X(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000)                                        \
  X(cuMemAlloc, ::cushare::shim::legacy::PFN_cuMemAlloc_v2000)                               \
  X(cuMemAlloc_v2, PFN_cuMemAlloc_v3020)                                                     \
  X(cuMemAllocPitch, ::cushare::shim::legacy::PFN_cuMemAllocPitch_v2000)                     \
  X(cuMemAllocPitch_v2, PFN_cuMemAllocPitch_v3020)                                           \
  X(cuMemFree, ::cushare::shim::legacy::PFN_cuMemFree_v2000)                                 \
  X(cuMemFree_v2, PFN_cuMemFree_v3020)                                                       \
  X(cuMemAllocManaged, PFN_cuMemAllocManaged_v6000)                                          \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020)                                             \
  X(cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020_ptsz)                                   \
  X(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020)                             \
  X(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync_v11020_ptsz)                   \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020)                                               \
  X(cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020_ptsz)                                     \
  X(cuMemPoolCreate, PFN_cuMemPoolCreate_v11020)                                             \
  X(cuMemPoolDestroy, PFN_cuMemPoolDestroy_v11020)                                           \
  X(cuMemPoolTrimTo, PFN_cuMemPoolTrimTo_v11020)                                             \
  X(cuMemCreate, PFN_cuMemCreate_v10020)                                                     \
  X(cuMemRelease, PFN_cuMemRelease_v10020)                                                   \
  X(cuMemMap, PFN_cuMemMap_v10020)                                                           \
  X(cuMemUnmap, PFN_cuMemUnmap_v10020)                                                       \
  X(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle_v11000)                     \
  X(cuMemMapArrayAsync, PFN_cuMemMapArrayAsync_v11010)                                       \
  X(cuMemMapArrayAsync_ptsz, PFN_cuMemMapArrayAsync_v11010_ptsz)                             \
  X(cuArrayCreate, ::cushare::shim::legacy::PFN_cuArrayCreate_v2000)                         \
  X(cuArrayCreate_v2, PFN_cuArrayCreate_v3020)                                               \
  X(cuArray3DCreate, ::cushare::shim::legacy::PFN_cuArray3DCreate_v2000)                     \
  X(cuArray3DCreate_v2, PFN_cuArray3DCreate_v3020)                                           \
  X(cuArrayDestroy, PFN_cuArrayDestroy_v2000)                                                \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate_v5000)                                \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy_v5000)                              \
  X(cuMemGetInfo, ::cushare::shim::legacy::PFN_cuMemGetInfo_v2000)                           \
  X(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020)                                                 \
  X(cuDeviceTotalMem, ::cushare::shim::legacy::PFN_cuDeviceTotalMem_v2000)                   \
  X(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v3020)                                         \
  X(cuCtxCreate, ::cushare::shim::legacy::PFN_cuCtxCreate_v2000)                             \
  X(cuCtxCreate_v2, PFN_cuCtxCreate_v3020)                                                   \
  X(cuCtxCreate_v3, PFN_cuCtxCreate_v11040)                                                  \
  X(cuCtxCreate_v4, PFN_cuCtxCreate_v12050)                                                  \
  X(cuCtxDestroy, ::cushare::shim::legacy::PFN_cuCtxDestroy_v2000)                           \
  X(cuCtxDestroy_v2, PFN_cuCtxDestroy_v4000)                                                 \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)                            \
  X(cuDevicePrimaryCtxRelease, ::cushare::shim::legacy::PFN_cuDevicePrimaryCtxRelease_v7000) \
  X(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000)                      \
  X(cuDevicePrimaryCtxReset, ::cushare::shim::legacy::PFN_cuDevicePrimaryCtxReset_v7000)     \
  X(cuDevicePrimaryCtxReset_v2, PFN_cuDevicePrimaryCtxReset_v11000)                          \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000)                                                \
  X(cuLaunchKernel_ptsz, PFN_cuLaunchKernel_v7000_ptsz)                                      \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx_v11060)                                           \
  X(cuLaunchKernelEx_ptsz, PFN_cuLaunchKernelEx_v11060_ptsz)                                 \
  X(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel_v9000)                          \
  X(cuLaunchCooperativeKernel_ptsz, PFN_cuLaunchCooperativeKernel_v9000_ptsz)                \
  X(cuLaunchCooperativeKernelMultiDevice, PFN_cuLaunchCooperativeKernelMultiDevice_v9000)    \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000)                                                 \
  X(cuGraphLaunch_ptsz, PFN_cuGraphLaunch_v10000_ptsz)                                       \
  X(cuGraphUpload, PFN_cuGraphUpload_v11010)                                                 \
  X(cuGraphUpload_ptsz, PFN_cuGraphUpload_v11010_ptsz)                                       \
  X(cuGraphAddMemAllocNode, PFN_cuGraphAddMemAllocNode_v11040)                               \
  X(cuGraphInstantiate, ::cushare::shim::legacy::PFN_cuGraphInstantiate_v10000)              \
  X(cuGraphInstantiate_v2, ::cushare::shim::legacy::PFN_cuGraphInstantiate_v11000)           \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040)                     \
  X(cuGraphInstantiateWithParams, PFN_cuGraphInstantiateWithParams_v12000)                   \
  X(cuGraphInstantiateWithParams_ptsz, PFN_cuGraphInstantiateWithParams_v12000_ptsz)         \
  X(cuStreamBeginCapture, ::cushare::shim::legacy::PFN_cuStreamBeginCapture_v10000)          \
  X(cuStreamBeginCapture_ptsz, ::cushare::shim::legacy::PFN_cuStreamBeginCapture_v10000)     \
  X(cuStreamBeginCapture_v2, PFN_cuStreamBeginCapture_v10010)                                \
  X(cuStreamBeginCapture_v2_ptsz, PFN_cuStreamBeginCapture_v10010_ptsz)                      \
  X(cuStreamBeginCaptureToGraph, PFN_cuStreamBeginCaptureToGraph_v12030)                     \
  X(cuStreamBeginCaptureToGraph_ptsz, PFN_cuStreamBeginCaptureToGraph_v12030_ptsz)           \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000)                                       \
  X(cuStreamEndCapture_ptsz, PFN_cuStreamEndCapture_v10000_ptsz)                             \
  X(cuStreamDestroy, ::cushare::shim::legacy::PFN_cuStreamDestroy_v2000)                     \
  X(cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000)                                           \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000)                                            \
  X(cuCtxSynchronize_v2, PFN_cuCtxSynchronize_v13000)                                        \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)                                      \
  X(cuStreamSynchronize_ptsz, PFN_cuStreamSynchronize_v7000_ptsz)

// Driver functions the shim only calls (not hooked).
#define CUSHARE_REAL_ONLY_DRIVER_FUNCTIONS(X)                                                \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020)                                        \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000)                                                \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000)                                                      \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)                                            \
  X(cuDeviceGetUuid_v2, PFN_cuDeviceGetUuid_v11040)                                          \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)                                    \
  X(cuDevicePrimaryCtxGetState, PFN_cuDevicePrimaryCtxGetState_v7000)                        \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                                              \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                                              \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice_v2000)                                                \
  X(cuCtxPushCurrent_v2, PFN_cuCtxPushCurrent_v4000)                                         \
  X(cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent_v4000)                                           \
  X(cuStreamGetCtx, PFN_cuStreamGetCtx_v9020)                                                \
  X(cuStreamQuery, PFN_cuStreamQuery_v2000)                                                  \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing_v10000)                                     \
  X(cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode_v10010)         \
  X(cuEventCreate, PFN_cuEventCreate_v2000)                                                  \
  X(cuEventRecord, PFN_cuEventRecord_v2000)                                                  \
  X(cuEventRecord_ptsz, PFN_cuEventRecord_v7000_ptsz)                                        \
  X(cuEventQuery, PFN_cuEventQuery_v2000)                                                    \
  X(cuEventSynchronize, PFN_cuEventSynchronize_v2000)                                        \
  X(cuEventElapsedTime_v2, PFN_cuEventElapsedTime_v12080)                                    \
  X(cuEventDestroy_v2, PFN_cuEventDestroy_v4000)                                             \
  X(cuMemPoolGetAttribute, PFN_cuMemPoolGetAttribute_v11020)                                 \
  X(cuDeviceGetMemPool, PFN_cuDeviceGetMemPool_v11020)                                       \
  X(cuArrayGetMemoryRequirements, PFN_cuArrayGetMemoryRequirements_v11060)                   \
  X(cuMipmappedArrayGetMemoryRequirements, PFN_cuMipmappedArrayGetMemoryRequirements_v11060) \
  X(cuDeviceGetGraphMemAttribute, PFN_cuDeviceGetGraphMemAttribute_v11040)                   \
  X(cuDeviceGraphMemTrim, PFN_cuDeviceGraphMemTrim_v11040)

// NVML functions the shim hooks, then those it only calls.
namespace nvml_pfn {
using GetMemoryInfo = nvml::Return (*)(nvml::Device, nvml::Memory*);
using GetMemoryInfoV2 = nvml::Return (*)(nvml::Device, nvml::MemoryV2*);
using GetProcessesV1 = nvml::Return (*)(nvml::Device, unsigned int*, nvml::ProcessInfoV1*);
using GetProcesses = nvml::Return (*)(nvml::Device, unsigned int*, nvml::ProcessInfo*);
using Init = nvml::Return (*)();
using Shutdown = nvml::Return (*)();
using GetUuid = nvml::Return (*)(nvml::Device, char*, unsigned int);
using GetHandleByUuid = nvml::Return (*)(const char*, nvml::Device*);
using GetCount = nvml::Return (*)(unsigned int*);
using GetHandleByIndex = nvml::Return (*)(unsigned int, nvml::Device*);
}  // namespace nvml_pfn

#define CUSHARE_HOOKED_NVML_FUNCTIONS(X)                                              \
  X(nvmlDeviceGetMemoryInfo, ::cushare::shim::nvml_pfn::GetMemoryInfo)                \
  X(nvmlDeviceGetMemoryInfo_v2, ::cushare::shim::nvml_pfn::GetMemoryInfoV2)           \
  X(nvmlDeviceGetComputeRunningProcesses, ::cushare::shim::nvml_pfn::GetProcessesV1)  \
  X(nvmlDeviceGetComputeRunningProcesses_v2, ::cushare::shim::nvml_pfn::GetProcesses) \
  X(nvmlDeviceGetComputeRunningProcesses_v3, ::cushare::shim::nvml_pfn::GetProcesses)

#define CUSHARE_REAL_ONLY_NVML_FUNCTIONS(X)                                \
  X(nvmlInit_v2, ::cushare::shim::nvml_pfn::Init)                          \
  X(nvmlShutdown, ::cushare::shim::nvml_pfn::Shutdown)                     \
  X(nvmlDeviceGetUUID, ::cushare::shim::nvml_pfn::GetUuid)                 \
  X(nvmlDeviceGetHandleByUUID, ::cushare::shim::nvml_pfn::GetHandleByUuid) \
  X(nvmlDeviceGetCount_v2, ::cushare::shim::nvml_pfn::GetCount)            \
  X(nvmlDeviceGetHandleByIndex_v2, ::cushare::shim::nvml_pfn::GetHandleByIndex)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct RealDriver {
#define CUSHARE_MEMBER(sym, type) type sym = nullptr;
  CUSHARE_HOOKED_DRIVER_FUNCTIONS(CUSHARE_MEMBER)
  CUSHARE_REAL_ONLY_DRIVER_FUNCTIONS(CUSHARE_MEMBER)
#undef CUSHARE_MEMBER
  bool library_loaded = false;  // libcuda.so.1 was found
};
#pragma GCC diagnostic pop

struct RealNvml {
#define CUSHARE_MEMBER(sym, type) type sym = nullptr;
  CUSHARE_HOOKED_NVML_FUNCTIONS(CUSHARE_MEMBER)
  CUSHARE_REAL_ONLY_NVML_FUNCTIONS(CUSHARE_MEMBER)
#undef CUSHARE_MEMBER
  bool library_loaded = false;
};

namespace detail {
extern RealDriver g_real_driver;
extern RealNvml g_real_nvml;
extern std::atomic<bool> g_real_driver_ready;
extern std::atomic<bool> g_real_nvml_ready;
void load_real_driver() noexcept;
void load_real_nvml() noexcept;
}  // namespace detail

// The real driver table, loaded on first call (thread-safe). Entries the
// installed driver lacks are nullptr (e.g. cuCtxCreate_v4 on a 12.4 driver).
inline const RealDriver& real() noexcept {
  if (!detail::g_real_driver_ready.load(std::memory_order_acquire)) detail::load_real_driver();
  return detail::g_real_driver;
}

inline const RealNvml& real_nvml() noexcept {
  if (!detail::g_real_nvml_ready.load(std::memory_order_acquire)) detail::load_real_nvml();
  return detail::g_real_nvml;
}

// glibc's own dlsym (found with dlvsym, never through the shim's dlsym hook).
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym() noexcept;

// Binds a hooked entry whose real pointer the driver handed out through
// cuGetProcAddress or a handle-scoped dlsym, when loading by name found none.
// `slot` is the address of a RealDriver/RealNvml member.
void bind_real_if_missing(void** slot, void* fn) noexcept;

}  // namespace cushare::shim
