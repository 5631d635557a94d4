#include "tests/fakegpu/cuda/launch_limits.hpp"

#include <mutex>

namespace fakegpu {

const SmLimits& device_sm_limits(int device) {
  // A device's compute capability is fixed when the state file is created.
  const DeviceSlot& d = driver().file->state().devices[device];
  return sm_limits(d.cc_major, d.cc_minor);
}

FunctionLimits function_limits(const Function& fn, int device) {
  const SmLimits& sm = device_sm_limits(device);
  FunctionLimits f;
  f.regs = fn.resources.regs;
  f.static_smem = fn.resources.static_smem;
  f.max_threads = fn.resources.max_threads;
  const auto set = fn.settings.find(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  f.max_dynamic_smem = set != fn.settings.end() ? static_cast<uint64_t>(set->second)
                                                : default_max_dynamic_smem(sm, f.static_smem);
  return f;
}

CUresult check_launch_resources(const Function& fn, int device, uint64_t threads,
                                uint64_t dynamic_smem) {
  FunctionLimits f;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    f = function_limits(fn, device);
  }
  const SmLimits& sm = device_sm_limits(device);
  if (threads > static_cast<uint64_t>(max_threads_per_block(sm, f.regs, f.max_threads)))
    return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  if (dynamic_smem > f.max_dynamic_smem) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

}  // namespace fakegpu
