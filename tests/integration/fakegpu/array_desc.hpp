#pragma once
// A CUDA array's descriptor in one expression.
#include <cuda.h>

#include <cstddef>

namespace fakegpu_test {

inline CUDA_ARRAY3D_DESCRIPTOR shape(size_t w, size_t h, size_t d, unsigned flags = 0,
                                     CUarray_format format = CU_AD_FORMAT_UNSIGNED_INT8,
                                     unsigned channels = 1) {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = w;
  desc.Height = h;
  desc.Depth = d;
  desc.Format = format;
  desc.NumChannels = channels;
  desc.Flags = flags;
  return desc;
}

}  // namespace fakegpu_test
