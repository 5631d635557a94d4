#include "tests/fakegpu/cuda/array_shape.hpp"

#include <algorithm>
#include <bit>

#include "tests/fakegpu/cuda/size_math.hpp"

namespace fakegpu {

int texture_limit(CUdevice_attribute attrib) {
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH:
      return 131072;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH:
      return 16384;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE:
      return 8192;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT:
      return 32768;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS:
      return 2048;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS:
      return 2046;
    default:
      return 0;
  }
}

namespace {

uint64_t format_bytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

bool within(size_t extent, CUdevice_attribute limit) {
  return extent <= static_cast<size_t>(texture_limit(limit));
}

// Whether the extents are one of the shapes the driver's table allows, within
// the device's limits. `*depth_is_layers` tells a layered or cubemap array,
// whose depth counts layers (which mipmap levels do not shrink).
bool valid_extents(const CUDA_ARRAY3D_DESCRIPTOR& d, bool mipmapped, bool* depth_is_layers) {
  const bool layered = d.Flags & CUDA_ARRAY3D_LAYERED;
  const bool cubemap = d.Flags & CUDA_ARRAY3D_CUBEMAP;
  *depth_is_layers = layered || cubemap;
  if (d.Width == 0) return false;
  if (cubemap) {
    if (d.Height != d.Width) return false;
    if (layered) {
      return d.Depth > 0 && d.Depth % 6 == 0 &&
             within(d.Width, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH) &&
             within(d.Depth, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS);
    }
    return d.Depth == 6 && within(d.Width, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH);
  }
  if (layered) {
    if (d.Depth == 0) return false;
    if (d.Height == 0) {
      return within(d.Width, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH) &&
             within(d.Depth, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS);
    }
    return within(d.Width, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH) &&
           within(d.Height, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT) &&
           within(d.Depth, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS);
  }
  if (d.Height == 0) {
    return d.Depth == 0 &&
           within(d.Width, mipmapped ? CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH
                                     : CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH);
  }
  if (d.Depth == 0) {
    if (d.Flags & CUDA_ARRAY3D_TEXTURE_GATHER) {
      return within(d.Width, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH) &&
             within(d.Height, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT);
    }
    if (mipmapped) {
      return within(d.Width, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH) &&
             within(d.Height, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT);
    }
    return within(d.Width, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH) &&
           within(d.Height, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT);
  }
  // 3D: either set of limits will do.
  return (within(d.Width, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH) &&
          within(d.Height, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT) &&
          within(d.Depth, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH)) ||
         (within(d.Width, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE) &&
          within(d.Height, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE) &&
          within(d.Depth, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE));
}

// Bytes of one mipmap level of `d` (level 0: the array itself).
bool level_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d, bool depth_is_layers, unsigned level,
                 uint64_t texel, uint64_t* out) {
  auto extent = [level](size_t e) { return std::max<uint64_t>(e >> level, 1); };
  const uint64_t depth = depth_is_layers ? std::max<uint64_t>(d.Depth, 1) : extent(d.Depth);
  uint64_t bytes = 0;
  return mul_size(extent(d.Width), extent(d.Height), &bytes) && mul_size(bytes, depth, &bytes) &&
         mul_size(bytes, texel, out);
}

}  // namespace

uint64_t texel_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4) return 0;
  return format_bytes(d.Format) * d.NumChannels;
}

CUresult array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& desc, uint64_t* bytes) {
  const uint64_t texel = texel_bytes(desc);
  bool layers = false;
  if (texel == 0 || !valid_extents(desc, false, &layers)) return CUDA_ERROR_INVALID_VALUE;
  return level_bytes(desc, layers, 0, texel, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult mipmapped_array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned* levels,
                               uint64_t* bytes) {
  const uint64_t texel = texel_bytes(desc);
  bool layers = false;
  if (texel == 0 || *levels == 0 || !valid_extents(desc, true, &layers))
    return CUDA_ERROR_INVALID_VALUE;
  // The chain ends at a 1x1x1 level: 1 + floor(log2(largest shrinking extent)).
  const uint64_t largest = std::max<uint64_t>({desc.Width, desc.Height, layers ? 0 : desc.Depth});
  *levels = std::min<unsigned>(*levels, std::bit_width(largest));
  uint64_t total = 0;
  for (unsigned level = 0; level < *levels; ++level) {
    uint64_t b = 0;
    if (!level_bytes(desc, layers, level, texel, &b) || !add_size(total, b, &total))
      return CUDA_ERROR_INVALID_VALUE;
  }
  *bytes = total;
  return CUDA_SUCCESS;
}

}  // namespace fakegpu
