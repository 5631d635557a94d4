// The Driver API entry points the probe uses, resolved at run time the way
// cudart does it: dlopen("libcuda.so.1") by soname, then one cuGetProcAddress_v2
// call per function. Under LD_PRELOAD the shim intercepts exactly these paths
// (its dlsym hook and its resolver), so the probe exercises what frameworks hit.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <stdexcept>
#include <string>

namespace cushare::gpuprobe {

struct DriverApi {
  PFN_cuInit_v2000 init = nullptr;
  PFN_cuDriverGetVersion_v2020 driverGetVersion = nullptr;
  PFN_cuGetErrorName_v6000 getErrorName = nullptr;
  PFN_cuDeviceGet_v2000 deviceGet = nullptr;
  PFN_cuDeviceGetName_v2000 deviceGetName = nullptr;
  PFN_cuDeviceTotalMem_v3020 deviceTotalMem = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 primaryCtxRetain = nullptr;
  PFN_cuDevicePrimaryCtxRelease_v11000 primaryCtxRelease = nullptr;
  PFN_cuCtxSetCurrent_v4000 ctxSetCurrent = nullptr;
  PFN_cuCtxSynchronize_v2000 ctxSynchronize = nullptr;
  PFN_cuMemGetInfo_v3020 memGetInfo = nullptr;
  PFN_cuMemAlloc_v3020 memAlloc = nullptr;
  PFN_cuMemFree_v3020 memFree = nullptr;
  PFN_cuMemAllocAsync_v11020 memAllocAsync = nullptr;
  PFN_cuMemFreeAsync_v11020 memFreeAsync = nullptr;
  PFN_cuMemsetD8Async_v3020 memsetD8Async = nullptr;
  PFN_cuModuleLoadData_v2000 moduleLoadData = nullptr;
  PFN_cuModuleGetFunction_v2000 moduleGetFunction = nullptr;
  PFN_cuLaunchKernel_v4000 launchKernel = nullptr;
  PFN_cuStreamCreate_v2000 streamCreate = nullptr;
  PFN_cuStreamDestroy_v4000 streamDestroy = nullptr;
  PFN_cuStreamSynchronize_v2000 streamSynchronize = nullptr;
  PFN_cuEventCreate_v2000 eventCreate = nullptr;
  PFN_cuEventDestroy_v4000 eventDestroy = nullptr;
  PFN_cuEventRecord_v2000 eventRecord = nullptr;
  PFN_cuEventQuery_v2000 eventQuery = nullptr;
  PFN_cuEventSynchronize_v2000 eventSynchronize = nullptr;
  PFN_cuStreamBeginCapture_v10010 streamBeginCapture = nullptr;
  PFN_cuStreamEndCapture_v10000 streamEndCapture = nullptr;
  PFN_cuGraphInstantiateWithFlags_v11040 graphInstantiateWithFlags = nullptr;
  PFN_cuGraphLaunch_v10000 graphLaunch = nullptr;
  PFN_cuGraphExecDestroy_v10000 graphExecDestroy = nullptr;
  PFN_cuGraphDestroy_v10000 graphDestroy = nullptr;
  PFN_cuDeviceGetGraphMemAttribute_v11040 deviceGetGraphMemAttribute = nullptr;
  PFN_cuDeviceGraphMemTrim_v11040 deviceGraphMemTrim = nullptr;

  int driver_version = 0;
  // How the entry points were found: "cuGetProcAddress_v2" or "dlsym".
  std::string resolved_via;

  // Loads libcuda.so.1 and resolves every entry point; throws on failure.
  static DriverApi load();

  std::string errorName(CUresult r) const;
};

// A failed Driver API call: carries the CUresult so callers can tell an
// out-of-memory refusal from a real error.
class CudaError : public std::runtime_error {
 public:
  CudaError(CUresult code, const std::string& what) : std::runtime_error(what), code_(code) {}
  CUresult code() const { return code_; }

 private:
  CUresult code_;
};

// Throws CudaError naming `call` unless r == CUDA_SUCCESS.
void check(const DriverApi& api, CUresult r, const char* call);

}  // namespace cushare::gpuprobe
