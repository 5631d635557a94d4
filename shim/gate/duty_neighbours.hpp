// The other allocations on this process's GPU in the local duty cycle (no
// daemon), watched so that an allocation may borrow the moments a slot's owner
// leaves the GPU idle (docs/scheduler.md, "No daemon"). Their usage
// regions are read with pread(), never mapped: another tenant may truncate
// its file, and a mapping would then fault in this process.
//
// Slow path only: the launch gate asks while its allocation is out of its
// slot with budget left, and refreshes the list with the duty table.
#pragma once

#include <string>
#include <vector>

#include "shim/gate/duty_cycle_table.hpp"
#include "shim/gate/gate_decision.hpp"

namespace cushare::shim {

// Replaces GPU `gpu`'s neighbours with those of `list` (claims in the table
// of the node run dir that holds `alloc_folder`; one per allocation),
// opening their usage regions.
void set_duty_neighbours(unsigned gpu, const std::string& alloc_folder,
                         const std::vector<DutyNeighbour>& list) noexcept;

// Whether every neighbour on `gpu` leaves the GPU idle now (kIdle: none of
// their processes has work on it); kBusy where one cannot be read.
gate::Neighbours duty_neighbours(unsigned gpu) noexcept;

// Around fork (registered with the gate's fork handlers): the lists are
// never copied into a child half-updated.
void duty_neighbours_before_fork() noexcept;
void duty_neighbours_after_fork_parent() noexcept;
void duty_neighbours_after_fork_child() noexcept;

}  // namespace cushare::shim
