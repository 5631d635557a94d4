// CUDA_VISIBLE_DEVICES as the driver applies it, for the code that sees GPUs
// through NVML (physical order, every GPU) but must key quotas the way CUDA
// numbers them: an NVML-only process (nvidia-smi) that creates a standalone
// allocation's regions. Pure.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace cushare::shim {

// The physical indices CUDA makes visible, in CUDA ordinal order. `value` is
// the variable (nullptr: unset, every GPU in order); `uuids` are the
// physical GPUs' "GPU-..." UUIDs in NVML order. Entries are separated by
// commas, spaces around them ignored: a decimal index, or a "GPU-" UUID or
// unique prefix of one. As the driver does, the list ends at the first entry
// that is malformed, unknown, ambiguous or repeated ("MIG-" instances
// included: quotas are per GPU).
std::vector<unsigned> cuda_visible_order(const char* value, std::span<const std::string> uuids);

}  // namespace cushare::shim
