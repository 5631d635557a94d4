// Whether the GPUs a container's device IDs name are allowed by the
// gpuSpanning rule. The kubelet picks the IDs itself (GetPreferredAllocation
// is only a hint) and may hand out units of several GPUs, e.g. 50 + 10 for a
// request of 60 on a node whose GPUs have 50 free each; such a container
// would get two small quotas instead of the one it asked for, so Allocate
// refuses it and the message becomes the pod's admission error.
#pragma once

#include <map>
#include <string>

#include "plugin/core/plugin_config.hpp"

namespace cushare::plugin {

// Units granted per GPU UUID. Throws AllocationError naming the GPUs, the
// units of each and the config key that allows it.
void check_gpu_spanning(const std::map<std::string, unsigned>& units_by_gpu, unsigned units_per_gpu,
                        GpuSpanning rule);

}  // namespace cushare::plugin
