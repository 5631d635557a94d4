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
#include <mutex>

#include "shim/accounting/overhead_estimate.hpp"
#include "shim/process/allocation_state.hpp"

namespace cushare::shim {

// NVML figures of device `ordinal` now.
MemorySample sample_memory(CUdevice ordinal) noexcept;
// The same with this process's charges on that device.
MemorySample sample_memory(const AllocationState& st, CUdevice ordinal) noexcept;

// What a context creation on `ordinal` reserves before the driver call: the
// overhead the last context measured on that GPU took (any process of the
// allocation) plus kLearnedMargin, else the default for the device's
// architecture (default_context_overhead).
std::uint64_t expected_context_overhead(const AllocationState& st, CUdevice ordinal) noexcept;

// Pure: the reservation for a context of a device of compute capability
// `major` that nothing was measured on yet. Conservative: above what a
// context takes with lazy module loading (CUDA 12.2 and later), so a first
// context never takes more than it reserved.
std::uint64_t default_context_overhead(int cc_major) noexcept;
inline constexpr std::uint64_t kLearnedMargin = 16ull << 20;

// A reservation for one context creation: taken before the driver call
// (false, with one log line, when it does not fit: the caller returns
// CUDA_ERROR_OUT_OF_MEMORY and does not create), then either settled on what
// the context took (context_created) or given back (the creation failed).
class ContextReservation {
 public:
  ContextReservation(const AllocationState& st, CUdevice ordinal) noexcept;
  ContextReservation(const ContextReservation&) = delete;
  ContextReservation& operator=(const ContextReservation&) = delete;
  ~ContextReservation();  // gives back what was neither settled nor kept

  bool ok() const noexcept { return ok_; }
  // The context exists: settle on its measured overhead (the samples taken
  // around the call, in a QuietWindow) and record it for its destruction.
  // Samples from a window that was not quiet (or that could not read the
  // pools' reservations) are not trusted: the context keeps its
  // reservation, or the measured figure where that is larger.
  void created(CUcontext ctx, const MemorySample& before, const MemorySample& after,
               bool quiet) noexcept;

 private:
  const AllocationState& st_;
  CUdevice ordinal_;
  unsigned gpu_;
  std::uint64_t reserved_ = 0;
  bool ok_ = false;
  bool done_ = false;
};

// A primary context may have been made without any call the shim hooks (the
// CUDA runtime retains it through a private interface of the driver). The
// first time the shim sees the process use `ordinal` (an allocation, a
// retain) it asks the driver whether the primary context is active and, if
// the shim has no record of it, charges it. One relaxed load afterwards.
// Call it outside any MemoryOp (it measures in a QuietWindow).
void note_device_use(const AllocationState& st, CUdevice ordinal) noexcept;
// The same check for a retain of an already active primary context; the
// caller holds measurement_mutex().
void charge_unseen_primary(const AllocationState& st, CUdevice ordinal) noexcept;

// Context creations and module loads change this process's device memory by
// an amount the shim measures across the call: they run one at a time per
// process, each in a QuietWindow (memory_quiescence.hpp), so each
// measurement sees its own call alone (they are rare and slow in the driver).
std::mutex& measurement_mutex() noexcept;
// Once per process: a measurement's window did not get quiet in time, so its
// call keeps what it reserved.
void log_unquiet_measurement() noexcept;

// Whether `ctx` is a context the shim saw made with cuCtxCreate* (any other
// context a process uses is a device's primary context).
bool is_created_context(CUcontext ctx) noexcept;

// Returns the charge of a destroyed context (primary: pass nullptr + ordinal).
void context_destroyed(const AllocationState& st, CUcontext ctx, CUdevice ordinal) noexcept;

// Fork child: the parent's contexts are not the child's.
void context_reset_after_fork() noexcept;

}  // namespace cushare::shim
