// This process's view of its allocation: the mapped `limits` (read-only) and
// `usage` regions, its process slot, and the map from CUDA device ordinals to
// entries of limits.gpus[] (by GPU UUID, so CUDA_VISIBLE_DEVICES by index,
// UUID or prefix all land on the right quota).
//
// Initialised once per process on the first successful cuInit (or the first
// hooked call after the driver is initialised), never from a constructor;
// again in a fork child (new slot). Read on every hooked call through one
// acquire load.
//
// For other shim components (the launch gate):
//   const AllocationState* st = allocation_state();   // nullptr: not active
//   unsigned g = current_gpu_index();                  // kNoGpu: none
//   st->limits->gpus[g], st->usage->gpus[g], *st->slot
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "shim/driver/cuda_api.hpp"
#include "shm/layout.hpp"

namespace cushare::shim {

inline constexpr unsigned kMaxDevices = 64;  // CUDA ordinals the shim maps
inline constexpr unsigned kNoGpu = 0xff;     // "not part of this allocation"

struct AllocationState {
  const shm::LimitsRegion* limits = nullptr;
  shm::UsageRegion* usage = nullptr;
  shm::ProcessSlot* slot = nullptr;
  unsigned slot_index = 0;
  int device_count = 0;                                     // visible CUDA devices
  std::array<std::uint8_t, kMaxDevices> gpu_of_device{};    // ordinal -> limits.gpus[] or kNoGpu
  std::array<std::uint64_t, kMaxDevices> physical_total{};  // cuDeviceTotalMem_v2 per ordinal
  std::vector<std::string> device_uuid;                     // ordinal -> the GPU's UUID
  bool oom_backtrace = false;
  std::string run_dir;
};

enum class ShimMode : std::uint8_t {
  kUninitialized,  // nothing decided yet
  kActive,         // enforcing; allocation_state() != nullptr
  kDisabled,       // CUSHARE_DISABLE=1: pure pass-through
  kFailed,         // bad configuration: cuInit fails, allocations are refused
};

namespace detail {
extern std::atomic<const AllocationState*> g_state;
extern std::atomic<ShimMode> g_mode;
}  // namespace detail

// The active state, or nullptr (not initialised yet, disabled, failed).
inline const AllocationState* allocation_state() noexcept {
  return detail::g_state.load(std::memory_order_acquire);
}

inline ShimMode shim_mode() noexcept {
  return detail::g_mode.load(std::memory_order_acquire);
}

// Initialises if not done yet. Returns CUDA_SUCCESS when the shim is active
// or disabled; CUDA_ERROR_INVALID_VALUE when the configuration is bad (every
// later call fails the same way: never silently unlimited); a driver error
// (e.g. CUDA_ERROR_NOT_INITIALIZED before cuInit) that a later call retries.
CUresult ensure_initialized() noexcept;

// What a hook should do with an accounted call.
enum class HookAction { kAccount, kForward, kFail };
// Fast path: one acquire load. `st` is set for kAccount, `error` for kFail.
inline HookAction hook_action(const AllocationState*& st, CUresult& error) noexcept {
  st = allocation_state();
  if (st) [[likely]]
    return HookAction::kAccount;
  error = ensure_initialized();
  if (error != CUDA_SUCCESS) return HookAction::kFail;
  st = allocation_state();
  return st ? HookAction::kAccount : HookAction::kForward;
}

// limits.gpus[] index of CUDA device `dev`; kNoGpu if unknown.
inline unsigned gpu_index_of_device(const AllocationState& st, CUdevice dev) noexcept {
  return dev >= 0 && dev < st.device_count ? st.gpu_of_device[static_cast<unsigned>(dev)] : kNoGpu;
}

// limits.gpus[] index of the current context's device; kNoGpu without a
// current context or for a device outside the allocation.
unsigned current_gpu_index(const AllocationState& st) noexcept;
// Same, and the CUDA ordinal (or -1).
unsigned current_gpu_index(const AllocationState& st, CUdevice& device) noexcept;
// current_gpu_index for the paths that allocate device memory: also charges,
// the first time, a primary context the shim did not see made
// (context_overhead.hpp, note_device_use).
unsigned allocation_gpu_index(const AllocationState& st, CUdevice& device) noexcept;

// Memory quota of limits.gpus[gpu] (one atomic load; kUnlimited = none).
inline std::uint64_t memory_limit(const AllocationState& st, unsigned gpu) noexcept {
  return st.limits->gpus[gpu].memory_limit_bytes.load(std::memory_order_relaxed);
}

// The allocation's regions for NVML hooks, which may run in processes that
// never initialise CUDA (nvidia-smi): the active state's regions, else the
// run dir's, opened on the first NVML query (and, standalone, created from
// the environment with the GPUs NVML lists, filtered by
// CUDA_VISIBLE_DEVICES), exactly as cuInit would. Null members: the shim is
// disabled (NVML reports the real figures). `failed`: the environment or
// the regions are unusable; NVML memory queries then fail rather than show
// a GPU the quota does not give.
struct RegionView {
  const shm::LimitsRegion* limits = nullptr;
  const shm::UsageRegion* usage = nullptr;
  bool failed = false;
};
RegionView region_view() noexcept;

}  // namespace cushare::shim
