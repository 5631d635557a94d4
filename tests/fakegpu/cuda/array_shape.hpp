#pragma once
// CUDA array shapes: the extents the driver accepts for each kind of array
// (1D, 2D, 3D, layered, cubemap), checked against the device's texture limits,
// and the bytes of texels an array of that shape holds.
#include "tests/fakegpu/cuda/driver.hpp"

namespace fakegpu {

// The texture-size limits every fakegpu device reports through
// cuDeviceGetAttribute (an H100's); 0 for any other attribute.
int texture_limit(CUdevice_attribute attrib);

// Bytes of one texel (format size times channels); 0 for a format or channel
// count the driver refuses.
uint64_t texel_bytes(const CUDA_ARRAY3D_DESCRIPTOR& desc);

// Texel bytes of the array `desc` describes (cuArray3DCreate, cuArrayCreate).
// CUDA_ERROR_INVALID_VALUE for a format, channel count or extents the driver
// refuses, extents past the device's limits included.
CUresult array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& desc, uint64_t* bytes);

// The same for a mipmapped array (cuMipmappedArrayCreate): all its levels.
// `*levels` is clamped to the full mipmap chain, as the runtime documents for
// cudaMallocMipmappedArray.
CUresult mipmapped_array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned* levels,
                               uint64_t* bytes);

}  // namespace fakegpu
