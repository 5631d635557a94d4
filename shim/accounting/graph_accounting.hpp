// Graph memory (cuGraphAddMemAllocNode, stream-captured cuMemAllocAsync):
// allocated from the device's graph memory pool when a graph is launched or
// uploaded. After each such launch the shim reads
// CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT and charges the pool's growth; if
// that does not fit it trims the graph pool (cuDeviceGraphMemTrim) and, if
// the memory is still there, charges it as overhead (it exists whatever the
// quota says) and logs the overrun, so later allocations are refused.
#pragma once

#include <cstdint>

#include "shim/process/allocation_state.hpp"

namespace cushare::shim {

// A graph with memory nodes was built or captured: launches must settle.
void graph_memory_expected() noexcept;
// Whether one was: graph launches then move the charges.
bool graph_memory_in_use() noexcept;
// The graph memory pool of `dev`: the quota its charge holds (overruns
// charged as overhead aside), and what the driver says it reserves now (both
// 0 while no graph has memory nodes); false when the driver cannot tell.
bool graph_memory_figures(CUdevice dev, std::uint64_t& charged, std::uint64_t& reserved) noexcept;

// Graph memory needs, tracked so a launch can reserve before it runs:
// allocation nodes added to `graph` (cuGraphAddMemAllocNode, or captured
// stream-ordered allocations), inherited by executables instantiated from it.
void graph_add_alloc(CUgraph graph, std::uint64_t bytes) noexcept;
void graph_instantiated(CUgraphExec exec, CUgraph graph) noexcept;

// Before cuGraphLaunch/cuGraphUpload of `exec`: reserves what its allocation
// nodes may add to the device's graph pool beyond what is already charged.
// False: over quota (refused, logged); `reserved` is what to settle after.
bool graph_launch_reserve(const AllocationState& st, CUgraphExec exec,
                          std::uint64_t& reserved) noexcept;

// After the launch: returns the up-front reservation and charges the growth.

void graph_memory_settle(const AllocationState& st, std::uint64_t reserved = 0) noexcept;

// Quota pressure on `gpu`: trim graph pools of its devices and settle.
void trim_graph_memory(const AllocationState& st, unsigned gpu) noexcept;

void graph_reset_after_fork() noexcept;

}  // namespace cushare::shim
