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

// Replaces GPU `gpu`'s neighbours with `neighbours` (claims in the table of
// the node run dir that holds `alloc_folder`), opening the usage regions of
// those it does not watch yet.
void set_duty_neighbours(unsigned gpu, const std::string& alloc_folder,
                         const std::vector<DutyNeighbour>& neighbours) noexcept;

// Whether every neighbour on `gpu` leaves the GPU idle now (kIdle: none of
// their processes has work on it); kBusy where one cannot be read.
gate::Neighbours duty_neighbours(unsigned gpu) noexcept;

// In a fork child: the lock may have been held by a thread that is gone.
void reset_duty_neighbours_after_fork() noexcept;

}  // namespace cushare::shim
