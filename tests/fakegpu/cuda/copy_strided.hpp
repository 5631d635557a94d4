#pragma once
// Strided copies (cuMemcpy2D, cuMemcpy3D and their async forms) between host
// memory, device memory and CUDA arrays, with the validation the driver
// documents for them.
#include "tests/fakegpu/cuda/driver.hpp"

namespace fakegpu {

// One end of a strided copy, as CUDA_MEMCPY2D/3D describe it.
struct CopyEnd {
  CUmemorytype type = CU_MEMORYTYPE_HOST;
  uint64_t address = 0;     // host, device or unified address (not for arrays)
  CUarray array = nullptr;  // CU_MEMORYTYPE_ARRAY
  uint64_t x_bytes = 0, y = 0, z = 0;
  uint64_t pitch = 0;   // bytes per row (ignored for arrays)
  uint64_t height = 0;  // rows per slice, 3D only (ignored for arrays)
};

struct CopyExtent {
  uint64_t width_bytes = 0, height = 0, depth = 1;
};

// Checks both ends against the extent and moves the bytes, all or nothing:
// CUDA_ERROR_INVALID_VALUE for an unknown memory type, a bad or destroyed
// array, an array offset that is not a whole texel, a copy past the array's
// extent, a pitch below the row or above CU_DEVICE_ATTRIBUTE_MAX_PITCH, a
// slice height below the rows (3D), a row outside device memory, or positions
// whose arithmetic does not fit in 64 bits. *bytes is what was copied and
// *device_local whether both ends are on the device (for the transfer time).
CUresult copy_strided(const CopyEnd& src, const CopyEnd& dst, const CopyExtent& extent,
                      uint64_t* bytes, bool* device_local);

}  // namespace fakegpu
