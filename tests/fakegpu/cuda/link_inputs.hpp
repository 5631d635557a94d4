#pragma once
// One input of a JIT link (cuLinkAddData / cuLinkAddFile) read for what it
// defines and what it needs from the others: kernels with their resources,
// device functions, globals, and the functions and globals it declares
// extern. fakegpu compiles nothing; linking is resolving these names.
#include <cuda.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tests/fakegpu/cuda/cubin_writer.hpp"

namespace fakegpu {

struct LinkUnit {
  std::string name;                      // for the error log
  std::vector<CubinFunction> functions;  // kernels and device functions it defines
  std::map<std::string, uint64_t> globals;
  std::set<std::string> function_refs;  // declared extern
  std::set<std::string> global_refs;
};

// Reads an input of `type` (called `name` in the log) for a link targeting SM
// `target_sm` (which of a fatbin's cubins to take) into one unit, or one per
// embedded fatbin of a host object or library. On failure returns the driver's error for the
// input (CUDA_ERROR_INVALID_PTX for text that is not PTX,
// CUDA_ERROR_INVALID_IMAGE for a binary it cannot read) and says why in *why.
CUresult read_link_input(CUjitInputType type, std::string_view data, const std::string& name,
                         int target_sm, std::vector<LinkUnit>* units, std::string* why);

}  // namespace fakegpu
