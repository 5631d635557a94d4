// Graph memory (cuGraphAddMemAllocNode, stream-captured cuMemAllocAsync):
// allocated from the device's graph memory pool when a graph is launched or
// uploaded. After each such launch the shim reads
// CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT and charges the pool's growth; if
// that does not fit it trims the graph pool (cuDeviceGraphMemTrim) and, if
// the memory is still there, charges it as overhead (it exists whatever the
// quota says) and logs the overrun, so later allocations are refused.
#pragma once

#include "shim/allocation_state.hpp"

namespace cushare::shim {

// A graph with memory nodes was built or captured: launches must settle.
void graph_memory_expected() noexcept;

// After a successful cuGraphLaunch / cuGraphUpload on the current device.
void graph_memory_settle(const AllocationState& st) noexcept;

// Quota pressure on `gpu`: trim graph pools of its devices and settle.
void trim_graph_memory(const AllocationState& st, unsigned gpu) noexcept;

void graph_reset_after_fork() noexcept;

}  // namespace cushare::shim
