// Context overhead: a CUDA context holds device memory (code, stacks, heap)
// that no allocation hook sees. Standalone, the shim estimates each
// context's cost as the drop in device free memory (NVML, which works before
// the context exists) across its creation and charges it to the process
// slot's overhead; destroying the context returns it. With the daemon
// running, its NVML per-process measurement replaces the estimate
// (QuotaLedger::set_overhead).
#pragma once

#include <cstdint>

#include "shim/allocation_state.hpp"

namespace cushare::shim {

// Device free memory as NVML reports it, or nullopt-as-false when NVML is
// not available. `ordinal` is the CUDA device.
bool device_free_memory(const AllocationState& st, CUdevice ordinal, std::uint64_t& free) noexcept;

// Records that `ctx` (nullptr for the primary context of `ordinal`) was
// created and cost `before - after` bytes; charges it.
void context_created(const AllocationState& st, CUcontext ctx, CUdevice ordinal, bool measured,
                     std::uint64_t before, std::uint64_t after) noexcept;

// Returns the charge of a destroyed context (primary: pass nullptr + ordinal).
void context_destroyed(const AllocationState& st, CUcontext ctx, CUdevice ordinal) noexcept;

// Fork child: the parent's contexts are not the child's.
void context_reset_after_fork() noexcept;

}  // namespace cushare::shim
