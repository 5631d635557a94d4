// `cusharectl create --gpu G`: G is a GPU UUID as NVML and nvidia-smi -L show
// it (GPU-..., or MIG-... for a MIG instance) or a GPU index, resolved to its
// UUID through NVML, because the limits region keys entries by UUID only: an
// index stored as is would match no GPU and the allocation could allocate
// nothing.
#pragma once

#include <string>
#include <vector>

#include "node/status_model.hpp"

namespace cushare::tools {

// The UUIDs `args` name, in order. `nvml_gpus` is what NVML reports (empty
// when NVML is missing); it is needed only for indexes. Throws
// std::invalid_argument naming the bad value: not a UUID nor an index, an
// index without NVML or out of range, the same GPU twice.
std::vector<std::string> resolve_gpu_args(const std::vector<std::string>& args,
                                          const std::vector<GpuInfo>& nvml_gpus);

// True when `arg` is a GPU index ("0", "12"): decimal digits only.
bool is_gpu_index(const std::string& arg);

}  // namespace cushare::tools
