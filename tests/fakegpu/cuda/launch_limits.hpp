#pragma once
// What a function may be launched with on a device: its recorded resources
// and settable attributes against the device's multiprocessor limits.
#include <cuda.h>

#include "tests/fakegpu/cuda/driver.hpp"
#include "tests/fakegpu/cuda/occupancy.hpp"
#include "tests/fakegpu/cuda/sm_limits.hpp"

namespace fakegpu {

// The limits of a device (physical index) by its compute capability.
const SmLimits& device_sm_limits(int device);
// The function's resources and settings on `device`. Caller holds driver().mu.
FunctionLimits function_limits(const Function& fn, int device);
// Refuses a launch the function cannot make on `device`, as the driver does:
// more threads than its registers or bounds allow is
// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, more dynamic shared memory than it may
// use CUDA_ERROR_INVALID_VALUE.
CUresult check_launch_resources(const Function& fn, int device, uint64_t threads,
                                uint64_t dynamic_smem);

}  // namespace fakegpu
