// Context overhead: a CUDA context holds device memory (code, stacks, heap)
// that no allocation hook sees. Standalone, the shim estimates each
// context's cost from NVML samples taken around its creation and charges it
// to the process slot's overhead; destroying the context returns it. With
// the daemon running, its NVML per-process measurement replaces the estimate
// (QuotaLedger::set_overhead).
//
// The estimate prefers this process's own NVML usage (usedGpuMemory of our
// PID: other processes allocating meanwhile do not pollute it); inside a PID
// namespace NVML lists host PIDs, so it falls back to the drop in device free
// memory, which concurrent allocations elsewhere can inflate.
#pragma once

#include <cstdint>

#include "shim/allocation_state.hpp"

namespace cushare::shim {

struct MemorySample {
  bool process_known = false;  // NVML listed this PID on the device
  std::uint64_t process_used = 0;
  bool device_known = false;
  std::uint64_t device_free = 0;
  bool nvml = false;  // NVML answered at all
};

// NVML figures of device `ordinal` now.
MemorySample sample_memory(CUdevice ordinal) noexcept;

// Pure: the overhead a context created between `before` and `after` cost;
// false when it cannot be told.
bool estimate_overhead(const MemorySample& before, const MemorySample& after,
                       std::uint64_t& overhead) noexcept;

// Before creating a context on `ordinal`: false (and one log line) when the
// allocation is already at its quota there, so the context would push it over.
bool context_fits(const AllocationState& st, CUdevice ordinal) noexcept;

// Records that `ctx` (nullptr for the primary context of `ordinal`) was
// created between the two samples; charges its estimated overhead.
void context_created(const AllocationState& st, CUcontext ctx, CUdevice ordinal,
                     const MemorySample& before, const MemorySample& after) noexcept;

// Returns the charge of a destroyed context (primary: pass nullptr + ordinal).
void context_destroyed(const AllocationState& st, CUcontext ctx, CUdevice ordinal) noexcept;

// Fork child: the parent's contexts are not the child's.
void context_reset_after_fork() noexcept;

}  // namespace cushare::shim
