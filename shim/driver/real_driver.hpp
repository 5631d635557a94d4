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
#include "shm/nvml_api.hpp"

namespace cushare::shim {

// The node-wide NVML declarations, reached as nvml:: by the hooks (which live
// outside the namespace, under a using-directive).
namespace nvml = ::cushare::nvml;

// Whether the shim can run on a driver without the function; the third column
// of every list below.
//  - kRequired: every driver the shim supports has it (CUDA 11.4 and later:
//    initialisation needs cuDeviceGetUuid_v2, new in 11.4), so the shim's own
//    code calls it without a check. A library without one is not a driver the
//    shim can enforce anything on: initialisation fails, naming it.
//  - kOptional: newer than 11.4, an old ABI a driver may drop, or deprecated.
//    The shim's own code checks before calling one.
// Either way a hook never calls through a missing pointer: when the driver
// lacks the hook's function, the hook answers what the driver answers for a
// function it does not have (CUSHARE_REAL_OR_NOT_FOUND, hooks/support.hpp).
enum class Need : bool { kOptional, kRequired };

// Driver functions the shim hooks: X(symbol, pointer type, need). The shim
// exports a wrapper named `symbol`; real().symbol is the driver's
// implementation.
#define CUSHARE_HOOKED_DRIVER_FUNCTIONS(X)                                                      \
  X(cuInit, PFN_cuInit_v2000, kRequired)                                                        \
  X(cuGetProcAddress, PFN_cuGetProcAddress_v11030, kOptional)                                   \
  X(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000, kOptional)                                \
  X(cuMemAlloc, ::cushare::shim::legacy::PFN_cuMemAlloc_v2000, kOptional)                       \
  X(cuMemAlloc_v2, PFN_cuMemAlloc_v3020, kRequired)                                             \
  X(cuMemAllocPitch, ::cushare::shim::legacy::PFN_cuMemAllocPitch_v2000, kOptional)             \
  X(cuMemAllocPitch_v2, PFN_cuMemAllocPitch_v3020, kRequired)                                   \
  X(cuMemFree, ::cushare::shim::legacy::PFN_cuMemFree_v2000, kOptional)                         \
  X(cuMemFree_v2, PFN_cuMemFree_v3020, kRequired)                                               \
  X(cuMemAllocManaged, PFN_cuMemAllocManaged_v6000, kRequired)                                  \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020, kRequired)                                     \
  X(cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020_ptsz, kRequired)                           \
  X(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020, kRequired)                     \
  X(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync_v11020_ptsz, kRequired)           \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020, kRequired)                                       \
  X(cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020_ptsz, kRequired)                             \
  X(cuMemPoolCreate, PFN_cuMemPoolCreate_v11020, kRequired)                                     \
  X(cuMemPoolDestroy, PFN_cuMemPoolDestroy_v11020, kRequired)                                   \
  X(cuMemPoolTrimTo, PFN_cuMemPoolTrimTo_v11020, kRequired)                                     \
  X(cuMemCreate, PFN_cuMemCreate_v10020, kRequired)                                             \
  X(cuMemRelease, PFN_cuMemRelease_v10020, kRequired)                                           \
  X(cuMemMap, PFN_cuMemMap_v10020, kRequired)                                                   \
  X(cuMemUnmap, PFN_cuMemUnmap_v10020, kRequired)                                               \
  X(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle_v11000, kRequired)             \
  X(cuMemExportToShareableHandle, PFN_cuMemExportToShareableHandle_v10020, kRequired)           \
  X(cuMemMapArrayAsync, PFN_cuMemMapArrayAsync_v11010, kRequired)                               \
  X(cuMemMapArrayAsync_ptsz, PFN_cuMemMapArrayAsync_v11010_ptsz, kRequired)                     \
  X(cuArrayCreate, ::cushare::shim::legacy::PFN_cuArrayCreate_v2000, kOptional)                 \
  X(cuArrayCreate_v2, PFN_cuArrayCreate_v3020, kRequired)                                       \
  X(cuArray3DCreate, ::cushare::shim::legacy::PFN_cuArray3DCreate_v2000, kOptional)             \
  X(cuArray3DCreate_v2, PFN_cuArray3DCreate_v3020, kRequired)                                   \
  X(cuArrayDestroy, PFN_cuArrayDestroy_v2000, kRequired)                                        \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate_v5000, kRequired)                        \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy_v5000, kRequired)                      \
  X(cuMemGetInfo, ::cushare::shim::legacy::PFN_cuMemGetInfo_v2000, kOptional)                   \
  X(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020, kRequired)                                         \
  X(cuDeviceTotalMem, ::cushare::shim::legacy::PFN_cuDeviceTotalMem_v2000, kOptional)           \
  X(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v3020, kRequired)                                 \
  X(cuCtxCreate, ::cushare::shim::legacy::PFN_cuCtxCreate_v2000, kOptional)                     \
  X(cuCtxCreate_v2, PFN_cuCtxCreate_v3020, kRequired)                                           \
  X(cuCtxCreate_v3, PFN_cuCtxCreate_v11040, kRequired)                                          \
  X(cuCtxCreate_v4, PFN_cuCtxCreate_v12050, kOptional)                                          \
  X(cuCtxDestroy, ::cushare::shim::legacy::PFN_cuCtxDestroy_v2000, kOptional)                   \
  X(cuCtxDestroy_v2, PFN_cuCtxDestroy_v4000, kRequired)                                         \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000, kRequired)                    \
  X(cuDevicePrimaryCtxRelease, ::cushare::shim::legacy::PFN_cuDevicePrimaryCtxRelease_v7000,    \
    kOptional)                                                                                  \
  X(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000, kRequired)              \
  X(cuDevicePrimaryCtxReset, ::cushare::shim::legacy::PFN_cuDevicePrimaryCtxReset_v7000,        \
    kOptional)                                                                                  \
  X(cuDevicePrimaryCtxReset_v2, PFN_cuDevicePrimaryCtxReset_v11000, kRequired)                  \
  X(cuModuleLoad, PFN_cuModuleLoad_v2000, kRequired)                                            \
  X(cuModuleLoadData, PFN_cuModuleLoadData_v2000, kRequired)                                    \
  X(cuModuleLoadDataEx, PFN_cuModuleLoadDataEx_v2010, kRequired)                                \
  X(cuModuleLoadFatBinary, PFN_cuModuleLoadFatBinary_v2000, kRequired)                          \
  X(cuModuleUnload, PFN_cuModuleUnload_v2000, kRequired)                                        \
  X(cuLibraryLoadData, PFN_cuLibraryLoadData_v12000, kOptional)                                 \
  X(cuLibraryLoadFromFile, PFN_cuLibraryLoadFromFile_v12000, kOptional)                         \
  X(cuLibraryUnload, PFN_cuLibraryUnload_v12000, kOptional)                                     \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000, kRequired)                                        \
  X(cuLaunchKernel_ptsz, PFN_cuLaunchKernel_v7000_ptsz, kRequired)                              \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx_v11060, kOptional)                                   \
  X(cuLaunchKernelEx_ptsz, PFN_cuLaunchKernelEx_v11060_ptsz, kOptional)                         \
  X(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel_v9000, kRequired)                  \
  X(cuLaunchCooperativeKernel_ptsz, PFN_cuLaunchCooperativeKernel_v9000_ptsz, kRequired)        \
  X(cuLaunchCooperativeKernelMultiDevice, PFN_cuLaunchCooperativeKernelMultiDevice_v9000,       \
    kOptional)                                                                                  \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000, kRequired)                                         \
  X(cuGraphLaunch_ptsz, PFN_cuGraphLaunch_v10000_ptsz, kRequired)                               \
  X(cuGraphUpload, PFN_cuGraphUpload_v11010, kRequired)                                         \
  X(cuGraphUpload_ptsz, PFN_cuGraphUpload_v11010_ptsz, kRequired)                               \
  X(cuGraphAddMemAllocNode, PFN_cuGraphAddMemAllocNode_v11040, kRequired)                       \
  X(cuGraphAddNode, PFN_cuGraphAddNode_v12020, kOptional)                                       \
  X(cuGraphAddNode_v2, PFN_cuGraphAddNode_v12030, kOptional)                                    \
  X(cuGraphInstantiate, ::cushare::shim::legacy::PFN_cuGraphInstantiate_v10000, kOptional)      \
  X(cuGraphInstantiate_v2, ::cushare::shim::legacy::PFN_cuGraphInstantiate_v11000, kOptional)   \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040, kRequired)             \
  X(cuGraphInstantiateWithParams, PFN_cuGraphInstantiateWithParams_v12000, kOptional)           \
  X(cuGraphInstantiateWithParams_ptsz, PFN_cuGraphInstantiateWithParams_v12000_ptsz, kOptional) \
  X(cuStreamBeginCapture, ::cushare::shim::legacy::PFN_cuStreamBeginCapture_v10000, kOptional)  \
  X(cuStreamBeginCapture_ptsz, ::cushare::shim::legacy::PFN_cuStreamBeginCapture_v10000,        \
    kOptional)                                                                                  \
  X(cuStreamBeginCapture_v2, PFN_cuStreamBeginCapture_v10010, kRequired)                        \
  X(cuStreamBeginCapture_v2_ptsz, PFN_cuStreamBeginCapture_v10010_ptsz, kRequired)              \
  X(cuStreamBeginCaptureToGraph, PFN_cuStreamBeginCaptureToGraph_v12030, kOptional)             \
  X(cuStreamBeginCaptureToGraph_ptsz, PFN_cuStreamBeginCaptureToGraph_v12030_ptsz, kOptional)   \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000, kRequired)                               \
  X(cuStreamEndCapture_ptsz, PFN_cuStreamEndCapture_v10000_ptsz, kRequired)                     \
  X(cuStreamDestroy, ::cushare::shim::legacy::PFN_cuStreamDestroy_v2000, kOptional)             \
  X(cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000, kRequired)                                   \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000, kRequired)                                    \
  X(cuCtxSynchronize_v2, PFN_cuCtxSynchronize_v13000, kOptional)                                \
  X(cuEventSynchronize, PFN_cuEventSynchronize_v2000, kRequired)                                \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000, kRequired)                              \
  X(cuStreamSynchronize_ptsz, PFN_cuStreamSynchronize_v7000_ptsz, kRequired)                    \
  X(cuMemcpyDtoH, ::cushare::shim::legacy::PFN_cuMemcpyDtoH_v2000, kOptional)                   \
  X(cuMemcpyDtoH_v2, PFN_cuMemcpyDtoH_v3020, kOptional)                                         \
  X(cuMemcpyDtoH_v2_ptds, PFN_cuMemcpyDtoH_v7000_ptds, kOptional)                               \
  X(cuStreamQuery, PFN_cuStreamQuery_v2000, kRequired)                                          \
  X(cuStreamQuery_ptsz, PFN_cuStreamQuery_v7000_ptsz, kOptional)                                \
  X(cuEventQuery, PFN_cuEventQuery_v2000, kRequired)

// Driver functions the shim only calls (not hooked).
#define CUSHARE_REAL_ONLY_DRIVER_FUNCTIONS(X)                                                   \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020, kRequired)                                \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000, kRequired)                                        \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000, kRequired)                                              \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000, kRequired)                                    \
  X(cuDeviceGetUuid_v2, PFN_cuDeviceGetUuid_v11040, kRequired)                                  \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000, kRequired)                            \
  X(cuDevicePrimaryCtxGetState, PFN_cuDevicePrimaryCtxGetState_v7000, kRequired)                \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000, kRequired)                                      \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000, kRequired)                                      \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice_v2000, kRequired)                                        \
  X(cuCtxPushCurrent_v2, PFN_cuCtxPushCurrent_v4000, kRequired)                                 \
  X(cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent_v4000, kRequired)                                   \
  X(cuStreamGetCtx, PFN_cuStreamGetCtx_v9020, kRequired)                                        \
  X(cuStreamCreate, PFN_cuStreamCreate_v2000, kRequired)                                        \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing_v10000, kRequired)                             \
  X(cuStreamGetCaptureInfo_v2, PFN_cuStreamGetCaptureInfo_v11030, kRequired)                    \
  X(cuStreamGetFlags, PFN_cuStreamGetFlags_v5050, kOptional)                                    \
  X(cuStreamWaitEvent, PFN_cuStreamWaitEvent_v3020, kRequired)                                  \
  X(cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode_v10010, kRequired) \
  X(cuEventCreate, PFN_cuEventCreate_v2000, kRequired)                                          \
  X(cuEventRecord, PFN_cuEventRecord_v2000, kRequired)                                          \
  X(cuEventRecord_ptsz, PFN_cuEventRecord_v7000_ptsz, kRequired)                                \
  X(cuEventElapsedTime_v2, PFN_cuEventElapsedTime_v12080, kOptional)                            \
  X(cuEventDestroy_v2, PFN_cuEventDestroy_v4000, kRequired)                                     \
  X(cuPointerGetAttribute, PFN_cuPointerGetAttribute_v4000, kOptional)                          \
  X(cuMemPoolGetAttribute, PFN_cuMemPoolGetAttribute_v11020, kRequired)                         \
  X(cuDeviceGetMemPool, PFN_cuDeviceGetMemPool_v11020, kRequired)                               \
  X(cuArrayGetMemoryRequirements, PFN_cuArrayGetMemoryRequirements_v11060, kOptional)           \
  X(cuMipmappedArrayGetMemoryRequirements, PFN_cuMipmappedArrayGetMemoryRequirements_v11060,    \
    kOptional)                                                                                  \
  X(cuDeviceGetGraphMemAttribute, PFN_cuDeviceGetGraphMemAttribute_v11040, kRequired)           \
  X(cuDeviceGraphMemTrim, PFN_cuDeviceGraphMemTrim_v11040, kRequired)

// NVML functions the shim hooks, then those it only calls.
#define CUSHARE_HOOKED_NVML_FUNCTIONS(X)                                                       \
  X(nvmlDeviceGetMemoryInfo, ::cushare::nvml::DeviceGetMemoryInfoFn, kRequired)                \
  X(nvmlDeviceGetMemoryInfo_v2, ::cushare::nvml::DeviceGetMemoryInfoV2Fn, kOptional)           \
  X(nvmlDeviceGetComputeRunningProcesses, ::cushare::nvml::DeviceGetProcessesV1Fn, kOptional)  \
  X(nvmlDeviceGetComputeRunningProcesses_v2, ::cushare::nvml::DeviceGetProcessesFn, kOptional) \
  X(nvmlDeviceGetComputeRunningProcesses_v3, ::cushare::nvml::DeviceGetProcessesFn, kOptional)

#define CUSHARE_REAL_ONLY_NVML_FUNCTIONS(X)                                         \
  X(nvmlInit_v2, ::cushare::nvml::InitFn, kRequired)                                \
  X(nvmlShutdown, ::cushare::nvml::ShutdownFn, kRequired)                           \
  X(nvmlDeviceGetUUID, ::cushare::nvml::DeviceGetStringFn, kRequired)               \
  X(nvmlDeviceGetHandleByUUID, ::cushare::nvml::DeviceGetHandleByUuidFn, kRequired) \
  X(nvmlDeviceGetCount_v2, ::cushare::nvml::DeviceGetCountFn, kRequired)            \
  X(nvmlDeviceGetHandleByIndex_v2, ::cushare::nvml::DeviceGetHandleByIndexFn, kRequired)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct RealDriver {
#define CUSHARE_MEMBER(sym, type, need) type sym = nullptr;
  CUSHARE_HOOKED_DRIVER_FUNCTIONS(CUSHARE_MEMBER)
  CUSHARE_REAL_ONLY_DRIVER_FUNCTIONS(CUSHARE_MEMBER)
#undef CUSHARE_MEMBER
  bool library_loaded = false;  // libcuda.so.1 was found
};
#pragma GCC diagnostic pop

struct RealNvml {
#define CUSHARE_MEMBER(sym, type, need) type sym = nullptr;
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
// installed driver lacks are nullptr (e.g. cuCtxCreate_v4 on a 12.4 driver)
// until the program hands the shim one through cuGetProcAddress or dlsym
// (bind_real_if_missing).
inline const RealDriver& real() noexcept {
  if (!detail::g_real_driver_ready.load(std::memory_order_acquire)) detail::load_real_driver();
  return detail::g_real_driver;
}

inline const RealNvml& real_nvml() noexcept {
  if (!detail::g_real_nvml_ready.load(std::memory_order_acquire)) detail::load_real_nvml();
  return detail::g_real_nvml;
}

// The first required function `table` lacks (its name), or nullptr.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr const char* missing_required(const RealDriver& table) noexcept {
#define CUSHARE_CHECK(sym, type, need) \
  if (Need::need == Need::kRequired && !table.sym) return #sym;
  CUSHARE_HOOKED_DRIVER_FUNCTIONS(CUSHARE_CHECK)
  CUSHARE_REAL_ONLY_DRIVER_FUNCTIONS(CUSHARE_CHECK)
#undef CUSHARE_CHECK
  return nullptr;
}
#pragma GCC diagnostic pop

constexpr const char* missing_required(const RealNvml& table) noexcept {
#define CUSHARE_CHECK(sym, type, need) \
  if (Need::need == Need::kRequired && !table.sym) return #sym;
  CUSHARE_HOOKED_NVML_FUNCTIONS(CUSHARE_CHECK)
  CUSHARE_REAL_ONLY_NVML_FUNCTIONS(CUSHARE_CHECK)
#undef CUSHARE_CHECK
  return nullptr;
}

// For a hook, by its own type (a Driver API function returns CUresult, an
// NVML one nvmlReturn_t): the table holding the real function of its name,
// and what the real library answers for a function it does not have.
template <class... Args>
inline const RealDriver& real_table_for(CUresult (*)(Args...)) noexcept {
  return real();
}
template <class... Args>
inline const RealNvml& real_table_for(nvml::Return (*)(Args...)) noexcept {
  return real_nvml();
}
template <class... Args>
constexpr CUresult not_found_result(CUresult (*)(Args...)) noexcept {
  return CUDA_ERROR_NOT_FOUND;
}
template <class... Args>
constexpr nvml::Return not_found_result(nvml::Return (*)(Args...)) noexcept {
  return nvml::kErrorFunctionNotFound;
}

// glibc's own dlsym (found with dlvsym, never through the shim's dlsym hook).
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym() noexcept;

// Binds a hooked entry whose real pointer the driver handed out through
// cuGetProcAddress or a handle-scoped dlsym, when loading by name found none.
// `slot` is the address of a RealDriver/RealNvml member.
void bind_real_if_missing(void** slot, void* fn) noexcept;

}  // namespace cushare::shim
