#include "tests/gpu/probe/device.hpp"

#include "tests/gpu/probe/kernels.hpp"

namespace cushare::gpuprobe {

Device::Device(const DriverApi& api) : api_(api) {
  check(api_, api_.init(0), "cuInit");
  check(api_, api_.deviceGet(&device_, 0), "cuDeviceGet");
  check(api_, api_.primaryCtxRetain(&ctx_, device_), "cuDevicePrimaryCtxRetain");
  check(api_, api_.ctxSetCurrent(ctx_), "cuCtxSetCurrent");
  check(api_, api_.moduleLoadData(&module_, kProbePtx), "cuModuleLoadData");
  check(api_, api_.moduleGetFunction(&spin_, module_, kSpinKernel), "cuModuleGetFunction(spin)");
  check(api_, api_.moduleGetFunction(&empty_, module_, kEmptyKernel), "cuModuleGetFunction(empty)");
}

Device::~Device() {
  // The primary context outlives the module; releasing it frees everything.
  if (ctx_ != nullptr) api_.primaryCtxRelease(device_);
}

Device::MemInfo Device::memInfo() const {
  MemInfo info;
  check(api_, api_.memGetInfo(&info.free, &info.total), "cuMemGetInfo_v2");
  return info;
}

CUresult Device::launchSpin(CUstream stream, unsigned long long ns) const {
  void* params[] = {&ns};
  return api_.launchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
}

CUresult Device::launchEmpty(CUstream stream) const {
  return api_.launchKernel(empty_, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
}

}  // namespace cushare::gpuprobe
