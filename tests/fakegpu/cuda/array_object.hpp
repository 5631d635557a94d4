#pragma once
// A CUDA array (cuArrayCreate, cuArray3DCreate): its shape, what it takes from
// the device, and its texels for copies in and out of it.
#include "tests/fakegpu/cuda/driver.hpp"

namespace fakegpu {

struct ArrayObject {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  uint64_t bytes = 0;  // charged to the device: the texel bytes rounded up to 2 MiB
  int device = 0;
  // The texels, row after row (rows of Width texels, max(Height, 1) rows per
  // slice, max(Depth, 1) slices or layers). The driver's tiled layout is
  // opaque to programs, which only reach texels through copies, so any
  // layout that copies agree on is faithful.
  Backing texels;
};

}  // namespace fakegpu
