#include "tests/gpu/probe/driver_api.hpp"

#include <dlfcn.h>

#include <algorithm>

namespace cushare::gpuprobe {
namespace {

// Every function used here exists in its requested form at CUDA 12.0, and
// asking for 12000 keeps 13.x drivers from handing out new-ABI variants
// (cuCtxSynchronize_v2 takes an extra argument).
constexpr int kRequestedCudaVersion = 12000;

template <typename Fn>
void resolve(void* lib, PFN_cuGetProcAddress_v12000 getProc, int version, const char* base,
             const char* versioned, Fn& out) {
  void* fn = nullptr;
  if (getProc != nullptr) {
    CUdriverProcAddressQueryResult status{};
    CUresult r = getProc(base, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS) fn = nullptr;
  }
  if (fn == nullptr) fn = dlsym(lib, versioned);
  if (fn == nullptr) {
    throw std::runtime_error(std::string("libcuda.so.1 does not provide ") + versioned);
  }
  out = reinterpret_cast<Fn>(fn);
}

}  // namespace

DriverApi DriverApi::load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    throw std::runtime_error(std::string("cannot load libcuda.so.1: ") +
                             (err != nullptr ? err : "unknown error"));
  }
  DriverApi api;
  resolve(lib, nullptr, 0, "cuDriverGetVersion", "cuDriverGetVersion", api.driverGetVersion);
  if (api.driverGetVersion(&api.driver_version) != CUDA_SUCCESS) {
    throw std::runtime_error("cuDriverGetVersion failed");
  }
  auto getProc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  api.resolved_via = getProc != nullptr ? "cuGetProcAddress_v2" : "dlsym";
  const int v = std::min(api.driver_version, kRequestedCudaVersion);

#define CUSHARE_RESOLVE(member, base, versioned) \
  resolve(lib, getProc, v, base, versioned, api.member)
  CUSHARE_RESOLVE(init, "cuInit", "cuInit");
  CUSHARE_RESOLVE(getErrorName, "cuGetErrorName", "cuGetErrorName");
  CUSHARE_RESOLVE(deviceGet, "cuDeviceGet", "cuDeviceGet");
  CUSHARE_RESOLVE(deviceGetName, "cuDeviceGetName", "cuDeviceGetName");
  CUSHARE_RESOLVE(deviceTotalMem, "cuDeviceTotalMem", "cuDeviceTotalMem_v2");
  CUSHARE_RESOLVE(primaryCtxRetain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
  CUSHARE_RESOLVE(primaryCtxRelease, "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2");
  CUSHARE_RESOLVE(ctxSetCurrent, "cuCtxSetCurrent", "cuCtxSetCurrent");
  CUSHARE_RESOLVE(ctxSynchronize, "cuCtxSynchronize", "cuCtxSynchronize");
  CUSHARE_RESOLVE(memGetInfo, "cuMemGetInfo", "cuMemGetInfo_v2");
  CUSHARE_RESOLVE(memAlloc, "cuMemAlloc", "cuMemAlloc_v2");
  CUSHARE_RESOLVE(memFree, "cuMemFree", "cuMemFree_v2");
  CUSHARE_RESOLVE(memAllocAsync, "cuMemAllocAsync", "cuMemAllocAsync");
  CUSHARE_RESOLVE(memFreeAsync, "cuMemFreeAsync", "cuMemFreeAsync");
  CUSHARE_RESOLVE(memsetD8Async, "cuMemsetD8Async", "cuMemsetD8Async");
  CUSHARE_RESOLVE(moduleLoadData, "cuModuleLoadData", "cuModuleLoadData");
  CUSHARE_RESOLVE(moduleGetFunction, "cuModuleGetFunction", "cuModuleGetFunction");
  CUSHARE_RESOLVE(launchKernel, "cuLaunchKernel", "cuLaunchKernel");
  CUSHARE_RESOLVE(streamCreate, "cuStreamCreate", "cuStreamCreate");
  CUSHARE_RESOLVE(streamDestroy, "cuStreamDestroy", "cuStreamDestroy_v2");
  CUSHARE_RESOLVE(streamSynchronize, "cuStreamSynchronize", "cuStreamSynchronize");
  CUSHARE_RESOLVE(eventCreate, "cuEventCreate", "cuEventCreate");
  CUSHARE_RESOLVE(eventDestroy, "cuEventDestroy", "cuEventDestroy_v2");
  CUSHARE_RESOLVE(eventRecord, "cuEventRecord", "cuEventRecord");
  CUSHARE_RESOLVE(eventQuery, "cuEventQuery", "cuEventQuery");
  CUSHARE_RESOLVE(eventSynchronize, "cuEventSynchronize", "cuEventSynchronize");
  CUSHARE_RESOLVE(streamBeginCapture, "cuStreamBeginCapture", "cuStreamBeginCapture_v2");
  CUSHARE_RESOLVE(streamEndCapture, "cuStreamEndCapture", "cuStreamEndCapture");
  CUSHARE_RESOLVE(graphInstantiateWithFlags, "cuGraphInstantiateWithFlags",
                  "cuGraphInstantiateWithFlags");
  CUSHARE_RESOLVE(graphLaunch, "cuGraphLaunch", "cuGraphLaunch");
  CUSHARE_RESOLVE(graphExecDestroy, "cuGraphExecDestroy", "cuGraphExecDestroy");
  CUSHARE_RESOLVE(graphDestroy, "cuGraphDestroy", "cuGraphDestroy");
  CUSHARE_RESOLVE(deviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute",
                  "cuDeviceGetGraphMemAttribute");
  CUSHARE_RESOLVE(deviceGraphMemTrim, "cuDeviceGraphMemTrim", "cuDeviceGraphMemTrim");
#undef CUSHARE_RESOLVE
  return api;
}

std::string DriverApi::errorName(CUresult r) const {
  const char* name = nullptr;
  if (getErrorName != nullptr && getErrorName(r, &name) == CUDA_SUCCESS && name != nullptr) {
    return name;
  }
  return "CUresult(" + std::to_string(static_cast<int>(r)) + ")";
}

void check(const DriverApi& api, CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) throw CudaError(r, std::string(call) + " failed: " + api.errorName(r));
}

}  // namespace cushare::gpuprobe
