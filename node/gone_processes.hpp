// Returns the charges of an allocation's processes that are gone. A process's
// memory stays charged through its exit (the driver frees it only at the
// process's teardown), so its slot outlives it until someone who can judge
// its liveness looks: the allocation's next process, a memory query, the
// daemon, and cusharectl reading the regions without a daemon.
#pragma once

#include <string>

namespace cushare::tools {

// Reclaims, in the allocation folder `folder`, the slots of processes of this
// process's PID namespace that are zombies or no longer exist. Does nothing
// where the usage region cannot be opened for writing (another user's
// allocation, a read-only mount) or does not exist. Returns the slots reclaimed.
unsigned reclaim_gone_processes(const std::string& folder) noexcept;

// The same for every allocation of `run_dir` (a node run dir or one folder).
unsigned reclaim_gone_processes_in(const std::string& run_dir) noexcept;

}  // namespace cushare::tools
