// Function and kernel attributes, and occupancy: all computed from the
// kernel's recorded resources (kernel_resources.hpp) and its device's
// multiprocessor limits (sm_limits.hpp), so they agree with each other and
// with the launch checks.
#include <mutex>

#include "tests/fakegpu/cuda/driver.hpp"
#include "tests/fakegpu/cuda/launch_limits.hpp"

using namespace fakegpu;

namespace {

// The function behind `handle` and the device (physical index) to answer
// for: `ordinal` where given (cuKernel*), else the function's module's device,
// else, for a library kernel not yet on a device, the current context's.
CUresult resolve(CUfunction handle, CUdevice ordinal, Function** out, int* device) {
  Function* fn = as_function(handle);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (ordinal >= 0) {
    *device = physical(ordinal);
  } else {
    {
      std::lock_guard<std::mutex> guard(driver().mu);
      if (!is_handle(fn, HandleKind::function)) return CUDA_ERROR_INVALID_HANDLE;
      *device = fn->module->device;
    }
    if (*device < 0) {
      Context* c = nullptr;
      if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
      *device = c->device;
    }
  }
  *out = fn;
  return CUDA_SUCCESS;
}

int setting(const Function& fn, CUfunction_attribute a, int otherwise) {
  const auto it = fn.settings.find(a);
  return it == fn.settings.end() ? otherwise : it->second;
}

CUresult get_attribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc, CUdevice ordinal) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (pi == nullptr || attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX)
    return CUDA_ERROR_INVALID_VALUE;
  Function* fn = nullptr;
  int device = 0;
  if (CUresult r = resolve(hfunc, ordinal, &fn, &device); r != CUDA_SUCCESS) return r;
  const SmLimits& sm = device_sm_limits(device);
  const DeviceSlot& slot = driver().file->state().devices[device];
  const int device_version = slot.cc_major * 10 + slot.cc_minor;
  const KernelResources& res = fn->resources;
  std::lock_guard<std::mutex> guard(driver().mu);
  const FunctionLimits limits = function_limits(*fn, device);
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = max_threads_per_block(sm, res.regs, res.max_threads);
      break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *pi = static_cast<int>(res.static_smem);
      break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *pi = static_cast<int>(res.local_bytes);
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *pi = res.regs;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
      *pi = res.ptx_version != 0 ? res.ptx_version : device_version;
      break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *pi = res.binary_version != 0 ? res.binary_version : device_version;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *pi = static_cast<int>(limits.max_dynamic_smem);
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *pi = setting(*fn, attrib, -1);
      break;
    default:  // the cluster settings; constant memory and CA caching are not recorded
      *pi = setting(*fn, attrib, 0);
      break;
  }
  return CUDA_SUCCESS;
}

// Whether `value` is one cuFuncSetAttribute accepts for `attrib` (the others
// are read-only).
bool settable(CUfunction_attribute attrib, int value, const SmLimits& sm, uint64_t static_smem) {
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      return value >= 0 && static_cast<uint64_t>(value) + static_smem <= sm.smem_per_block_optin;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      return value >= -1 && value <= 100;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      return value >= 0;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      return value == 0 || value == 1;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      return value >= CU_CLUSTER_SCHEDULING_POLICY_DEFAULT &&
             value <= CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING;
    default:
      return false;
  }
}

CUresult set_attribute(CUfunction hfunc, CUfunction_attribute attrib, int value, CUdevice ordinal) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Function* fn = nullptr;
  int device = 0;
  if (CUresult r = resolve(hfunc, ordinal, &fn, &device); r != CUDA_SUCCESS) return r;
  if (!settable(attrib, value, device_sm_limits(device), fn->resources.static_smem))
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  fn->settings[attrib] = value;
  return CUDA_SUCCESS;
}

// The function and device for an occupancy query; any bad handle is
// CUDA_ERROR_INVALID_VALUE, the only error these functions document for one.
CUresult occupancy_input(CUfunction func, unsigned flags, FunctionLimits* limits, int* device) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  // CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE only matters where global caching
  // partitions an SM (compute capability 5.x); every simulated device is 7.0+.
  if ((flags & ~static_cast<unsigned>(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  Function* fn = nullptr;
  if (CUresult r = resolve(func, -1, &fn, device); r != CUDA_SUCCESS)
    return r == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : r;
  std::lock_guard<std::mutex> guard(driver().mu);
  *limits = function_limits(*fn, *device);
  return CUDA_SUCCESS;
}

CUresult active_blocks(int* numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize,
                       unsigned flags) {
  if (numBlocks == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FunctionLimits limits;
  int device = 0;
  if (CUresult r = occupancy_input(func, flags, &limits, &device); r != CUDA_SUCCESS) return r;
  if (blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
  *numBlocks = max_active_blocks(device_sm_limits(device), limits, blockSize, dynamicSMemSize);
  return CUDA_SUCCESS;
}

CUresult potential_block_size(int* minGridSize, int* blockSize, CUfunction func,
                              CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize,
                              int blockSizeLimit, unsigned flags) {
  if (minGridSize == nullptr || blockSize == nullptr || blockSizeLimit < 0)
    return CUDA_ERROR_INVALID_VALUE;
  FunctionLimits limits;
  int device = 0;
  if (CUresult r = occupancy_input(func, flags, &limits, &device); r != CUDA_SUCCESS) return r;
  // The callback, where given, replaces the constant size; it is the caller's
  // code and may call the driver, so no lock is held around it.
  const auto dynamic = [&](int block) -> uint64_t {
    return blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(block) : dynamicSMemSize;
  };
  const BlockSizeChoice best =
      best_block_size(device_sm_limits(device), limits, dynamic, blockSizeLimit);
  *blockSize = best.block_size;
  *minGridSize = best.blocks_per_sm * static_cast<int>(driver().file->state().devices[device].sms);
  return CUDA_SUCCESS;
}

}  // namespace

FAKEGPU_API CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  // NULL is not a handle here but a missing argument.
  if (hfunc == nullptr)
    return check_ready() != CUDA_SUCCESS ? check_ready() : CUDA_ERROR_INVALID_VALUE;
  return get_attribute(pi, attrib, hfunc, -1);
}

// A kernel's attributes are its function's on the given device.
FAKEGPU_API CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel,
                                          CUdevice dev) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (!valid_ordinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return get_attribute(pi, attrib, reinterpret_cast<CUfunction>(kernel), dev);
}

FAKEGPU_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  return set_attribute(hfunc, attrib, value, -1);
}

// Settings are the kernel's on every device (the driver keeps them per device).
FAKEGPU_API CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                          CUdevice dev) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (!valid_ordinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return set_attribute(reinterpret_cast<CUfunction>(kernel), attrib, val, dev);
}

FAKEGPU_API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  (void)config;
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  return as_function(hfunc) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FAKEGPU_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func,
                                                                 int blockSize,
                                                                 size_t dynamicSMemSize) {
  return active_blocks(numBlocks, func, blockSize, dynamicSMemSize, CU_OCCUPANCY_DEFAULT);
}

FAKEGPU_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int* numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize, unsigned int flags) {
  return active_blocks(numBlocks, func, blockSize, dynamicSMemSize, flags);
}

FAKEGPU_API CUresult cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize,
                                                      CUfunction func,
                                                      CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                      size_t dynamicSMemSize, int blockSizeLimit) {
  return potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                              dynamicSMemSize, blockSizeLimit, CU_OCCUPANCY_DEFAULT);
}

FAKEGPU_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(
    int* minGridSize, int* blockSize, CUfunction func,
    CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit,
    unsigned int flags) {
  return potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                              dynamicSMemSize, blockSizeLimit, flags);
}
