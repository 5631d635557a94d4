#pragma once
// Exported VMM allocations in the node-wide state (SharedAllocation): who
// holds each one and whose memory it is charged to. Pure logic on
// SharedState, like the engine; callers hold the state mutex.
//
// The device is charged once, at cuMemCreate, to the creator. While several
// processes hold the allocation the charge stays with one of them; when that
// one lets go (releases and unmaps, or dies) the charge moves to another
// holder, so the device's used memory equals the sum of the live processes'
// mem[] at every moment, as the reaper and repair_after_owner_death assume.
#include <cstdint>

#include "tests/fakegpu/core/layout.hpp"

namespace fakegpu {

// Records an allocation of `bytes` on `device`, already charged to `proc`,
// as exported through the file (dev, ino). -1 when the table is full.
int32_t publish_shared(SharedState& s, int32_t proc, uint32_t device, uint64_t bytes,
                       uint64_t handle_types, uint64_t file_dev, uint64_t file_ino);
// The live entry exported through the file (dev, ino), or -1.
int32_t find_shared(const SharedState& s, uint64_t file_dev, uint64_t file_ino);
// Adds `proc` as a holder (once). False when the entry has no room for it.
bool hold_shared(SharedState& s, int32_t slot, int32_t proc);
// `proc` holds the allocation no more: the charge moves to another holder,
// or returns to the device with the last one.
void drop_shared(SharedState& s, int32_t slot, int32_t proc);
// Everything `proc` held, for a process that exits or died.
void drop_all_shared(SharedState& s, int32_t proc);

}  // namespace fakegpu
