#pragma once
// Processes across PID namespaces. The real driver knows every process by its
// PID in the initial namespace (the kernel module tells it), so NVML on the
// host lists container processes by their host PIDs, and a container's death
// frees its memory. fakegpu's clients only know their own PID in their own
// namespace: a process slot records that PID, the namespace (the inode of
// /proc/self/ns/pid) and the start time, and whoever looks at it from another
// namespace finds the process in its own view of /proc (see_foreign), after
// which the slot also carries its PID in that view.
#include <cstdint>
#include <optional>

#include "tests/fakegpu/core/layout.hpp"

namespace fakegpu {

// The inode of this process's PID namespace (cached; 0 when unknown).
uint64_t own_pidns();

// The PID of `slot`'s process as this process sees it, when it can: its own
// namespace, or one whose PID was filled in for this namespace.
std::optional<int32_t> visible_pid(const ProcSlot& slot);

// Whether the process of `slot` is gone, as far as this process can judge
// (nullopt: it lives in a namespace this process has no PID for).
std::optional<bool> process_gone(const ProcSlot& slot);

class StateFile;
// Fills in, for live slots of other namespaces, the PID their process has in
// this process's view, by a scan of /proc made outside the state lock. Called
// by the observers that run on the node (NVML, fakegpu-stat), which can see
// container processes; a no-op when every slot is already visible.
void see_foreign(StateFile& file);

}  // namespace fakegpu
