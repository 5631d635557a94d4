#pragma once
// Device memory of loaded modules and libraries. The driver copies a loaded
// image's code and its globals (__device__ and __constant__ variables) into
// device memory, so every load takes memory from the device until the unload
// (or the context's destruction). fakegpu models it deterministically: the
// image's bytes plus its globals' bytes, rounded up to 2 MiB granules.
#include "tests/fakegpu/cuda/driver.hpp"

namespace fakegpu {

// What loading `m` takes from a device; false when its globals' sizes do not
// fit in 64 bits (an image no device could load).
bool module_footprint(const Module& m, uint64_t* bytes);

// Loads `m` onto `device`: charges its footprint and gives each global an
// address in device memory. CUDA_ERROR_OUT_OF_MEMORY when the device (or the
// address space) is full, charging nothing. `m` must not be reachable by
// other threads yet; the caller does not hold driver().mu.
CUresult place_module(Module* m, int device);

// The same for a library already registered (loaded while no context was
// current), on the device of the current context: a no-op once placed.
// CUDA_ERROR_INVALID_HANDLE if the handle went away meanwhile.
CUresult place_library(const void* handle, int device);

// Frees the globals' addresses of `m` (caller holds driver().mu) and returns
// the bytes to uncharge, with *device, once the caller has released the lock.
uint64_t unplace_module(Module* m, int* device);

}  // namespace fakegpu
