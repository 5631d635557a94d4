// The node's GPUs (index, UUID, name, memory) from NVML, loaded with dlopen
// so cusharectl runs on machines without a driver (it then knows UUIDs only
// from the regions). Inside a container with the shim preloaded, NVML reports
// the quota view of memory, which is what a tenant should see.
#pragma once

#include <vector>

#include "node/status_model.hpp"

namespace cushare::tools {

// Empty when libnvidia-ml.so.1 is missing or nvmlInit fails.
std::vector<GpuInfo> query_gpus_nvml();

}  // namespace cushare::tools
