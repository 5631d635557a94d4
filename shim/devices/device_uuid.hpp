// GPU identity as NVML and CUDA_VISIBLE_DEVICES spell it.
#pragma once

#include <string>

#include "shim/driver/cuda_api.hpp"

namespace cushare::shim {

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lower-case hex), the form
// nvmlDeviceGetUUID returns and limits.gpus[].uuid stores.
std::string format_gpu_uuid(const CUuuid& uuid);

}  // namespace cushare::shim
