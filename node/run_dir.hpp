// The run dir on disk: a node's (allocations in DIR/alloc/<id>/, the daemon's
// socket at DIR/cushared.sock) or one allocation's folder (DIR/limits), as a
// container sees it at CUSHARE_RUN_DIR. Reading is read-only.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "node/region_reader.hpp"
#include "node/status_model.hpp"
#include "shm/run_dir_layout.hpp"

namespace cushare::tools {

inline constexpr const char* kDefaultRunDir = shm::kDefaultNodeRunDir;
using shm::kAllocDirName;
using shm::kAllocFolderMode;
using shm::kAllocRootMode;
using shm::kLimitsName;
using shm::kPreloadName;
using shm::kSocketName;
using shm::kUsageName;

// A problem with what the user asked for (exit code 2 territory is decided by the caller).
class NotFoundError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// CUSHARE_RUN_DIR if set, else /var/run/cushare.
std::string default_run_dir();

// Tells a node run dir from an allocation folder by content. Throws
// NotFoundError when `dir` does not exist or is not a directory.
RunDirKind detect_run_dir(const std::string& dir);

std::string socket_path(const std::string& run_dir);
std::string allocation_dir(const std::string& run_dir, const std::string& id);

// Allocation ids name folders: 1-63 of [A-Za-z0-9._-], not starting with '.'.
// Returns an error message, or nullopt when valid.
std::optional<std::string> check_allocation_id(const std::string& id);

// The ids under DIR/alloc/ that hold a limits file or look like allocations, sorted.
std::vector<std::string> list_allocation_ids(const std::string& run_dir);

// Both regions of one allocation folder, mapped (usage only if it exists).
struct AllocationFiles {
  LimitsFile limits;
  std::optional<UsageFile> usage;
  RegionViews views() const;
};
AllocationFiles open_allocation(const std::string& folder);

// Status of the whole run dir read from the regions. Unreadable allocations
// become Status::problems, not exceptions.
Status read_status_from_regions(const std::string& run_dir, std::vector<GpuInfo> gpus,
                                const Now& now);

// One allocation of a node run dir (or the allocation folder itself, when
// `run_dir` is one and `id` is empty or its own id). Throws NotFoundError or
// RegionReadError.
Allocation read_allocation(const std::string& run_dir, const std::string& id, const Now& now);

}  // namespace cushare::tools
