// cusharectl's view of an allocation's region files: shm's mappings, with
// every failure turned into one actionable line (what is wrong + what to do).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include "shm/region_file.hpp"

namespace cushare::tools {

class RegionReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Region flag for allocations made by `cusharectl create`.
using shm::kCreatedByCtl;

struct LimitsFile {
  shm::LimitsMapping mapping;
  const shm::LimitsRegion* region() const { return &mapping.region(); }
};
struct UsageFile {
  shm::UsageMapping mapping;
  const shm::UsageRegion* region() const { return &mapping.region(); }
};

// Throw RegionReadError when the file is missing, unreadable, or of another
// magic, layout version or size. `writable` maps limits for `set`.
LimitsFile open_limits(const std::string& path, bool writable = false);
UsageFile open_usage(const std::string& path);

// The hint appended to a shm::RegionError's message.
std::string region_error_message(const shm::RegionError& error);

}  // namespace cushare::tools
