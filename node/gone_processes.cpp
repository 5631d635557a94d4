#include "node/gone_processes.hpp"

#include <unistd.h>

#include <filesystem>

#include "node/run_dir.hpp"
#include "shm/process_slots.hpp"
#include "shm/region_file.hpp"

namespace cushare::tools {

unsigned reclaim_gone_processes(const std::string& folder) noexcept {
  try {
    const auto pidns = shm::read_pidns_inode(getpid());
    if (!pidns) return 0;
    auto usage = shm::UsageMapping::open(std::filesystem::path(folder) / kUsageName,
                                         shm::Access::kReadWrite);
    return shm::reclaim_dead_slots(usage.mutable_region(),
                                   shm::LivenessChecker::same_namespace(*pidns))
        .slots;
  } catch (...) {
    return 0;  // not ours to write, damaged, or gone: the reader reports what it finds
  }
}

unsigned reclaim_gone_processes_in(const std::string& run_dir) noexcept {
  try {
    if (detect_run_dir(run_dir) == RunDirKind::kAllocation) return reclaim_gone_processes(run_dir);
    unsigned n = 0;
    for (const auto& id : list_allocation_ids(run_dir))
      n += reclaim_gone_processes(allocation_dir(run_dir, id));
    return n;
  } catch (...) {
    return 0;
  }
}

}  // namespace cushare::tools
