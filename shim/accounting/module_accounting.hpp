// Device memory of loaded modules and libraries. The driver copies a loaded
// image's code and globals into device memory, which no allocation hook
// sees; without a charge a tenant could fill the device through module
// loads. Each load reserves a bound read from the image (module_image.hpp)
// before the driver call and is refused with CUDA_ERROR_OUT_OF_MEMORY when
// the bound does not fit. After the call the charge settles on what the
// load took, measured like a context's overhead (this PID's NVML figure,
// else the device's free memory, across the load; loads are serialised with
// context creations, and the process's own charges that moved meanwhile are
// subtracted). A load that took more than its bound is charged the rest if
// that fits, else unloaded again and refused. A load that took nothing
// measurable (a library loaded with no context current, or a driver that
// loads lazily) stays charged its bound: the memory follows at first use.
//
// The charge is returned at cuModuleUnload / cuLibraryUnload, and a
// module's also when its context is destroyed (the driver destroys the
// context's modules with it). A library's charge stays until it is unloaded.
#pragma once

#include <cstdint>
#include <vector>

#include "shim/driver/driver_call.hpp"
#include "shim/process/allocation_state.hpp"

namespace cushare::shim {

enum class ModuleKind : std::uint8_t { kModule, kLibrary };

// How a loaded handle is unloaded again (the driver's own function).
using UnloadCall = CUresult (*)(void* handle) noexcept;

// `load` loads an image bounded by `bound` and writes the handle to
// *handle. Serialised per process with context creations.
CUresult charged_module_load(const AllocationState& st, ModuleKind kind, const char* api,
                             std::uint64_t bound, void* const* handle, DriverCall load,
                             UnloadCall unload) noexcept;

// `unload` unloads `handle`; on success its charge is returned.
CUresult charged_module_unload(const AllocationState* st, ModuleKind kind, void* handle,
                               DriverCall unload) noexcept;

// The modules loaded in context `ctx` (nullptr: the primary context of
// `ordinal`), taken before the driver call that may destroy it: a module
// loaded after the call into a new context at the same address is not
// among them.
using ContextModules = std::vector<std::uint64_t>;
ContextModules modules_of_context(CUcontext ctx, CUdevice ordinal) noexcept;
// The driver destroyed them with their context: their charges return.
void modules_destroyed(const AllocationState& st, const ContextModules& modules) noexcept;

// Fork child: the parent's modules are not the child's.
void module_reset_after_fork() noexcept;

}  // namespace cushare::shim
