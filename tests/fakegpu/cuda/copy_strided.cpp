#include "tests/fakegpu/cuda/copy_strided.hpp"

#include <algorithm>
#include <cstring>

#include "tests/fakegpu/cuda/array_object.hpp"
#include "tests/fakegpu/cuda/array_shape.hpp"
#include "tests/fakegpu/cuda/size_math.hpp"

namespace fakegpu {

namespace {

// What every current GPU reports as CU_DEVICE_ATTRIBUTE_MAX_PITCH.
constexpr uint64_t kMaxPitch = 2147483647;

// An end checked against the copy's extent, under driver().mu: where each
// row of the copy lies.
struct Layout {
  ArrayObject* array = nullptr;
  bool device = false;  // a linear end that must lie in device memory
  uint64_t origin = 0;  // address (linear) or texel-byte offset (array) of the first row
  uint64_t pitch = 0;   // bytes between rows
  uint64_t slice = 0;   // bytes between slices
};

CUresult array_layout(const CopyEnd& e, const CopyExtent& x, Layout* out) {
  auto* a = handle_object<ArrayObject>(e.array, HandleKind::array);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The shape checks at creation bound every product below far under 2^64.
  const uint64_t texel = texel_bytes(a->desc);
  const uint64_t row = a->desc.Width * texel;
  const uint64_t rows = std::max<uint64_t>(a->desc.Height, 1);
  const uint64_t slices = std::max<uint64_t>(a->desc.Depth, 1);
  uint64_t right = 0, bottom = 0, back = 0;
  if (e.x_bytes % texel != 0 || !add_size(e.x_bytes, x.width_bytes, &right) || right > row ||
      !add_size(e.y, x.height, &bottom) || bottom > rows || !add_size(e.z, x.depth, &back) ||
      back > slices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  out->array = a;
  out->pitch = row;
  out->slice = row * rows;
  out->origin = e.z * out->slice + e.y * row + e.x_bytes;
  return CUDA_SUCCESS;
}

CUresult linear_layout(const CopyEnd& e, const CopyExtent& x, Layout* out) {
  out->device = e.type == CU_MEMORYTYPE_DEVICE;
  uint64_t right = 0;
  if (!add_size(e.x_bytes, x.width_bytes, &right) || e.pitch < right || e.pitch > kMaxPitch)
    return CUDA_ERROR_INVALID_VALUE;
  // An end that steps slices does so by its height, which must hold the copied rows.
  uint64_t bottom = 0;
  const bool slices = x.depth > 1 || e.z > 0;
  if (slices && (!add_size(e.y, x.height, &bottom) || e.height < bottom))
    return CUDA_ERROR_INVALID_VALUE;
  out->pitch = e.pitch;
  uint64_t first_row = 0, offset = 0;
  if (!mul_size(e.pitch, slices ? e.height : 0, &out->slice) ||
      !mul_size(e.z, out->slice, &offset) || !mul_size(e.y, e.pitch, &first_row) ||
      !add_size(offset, first_row, &offset) || !add_size(offset, e.x_bytes, &offset) ||
      !add_size(e.address, offset, &out->origin)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult layout(const CopyEnd& e, const CopyExtent& x, Layout* out) {
  switch (e.type) {
    case CU_MEMORYTYPE_ARRAY:
      return array_layout(e, x, out);
    case CU_MEMORYTYPE_HOST:
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
      return linear_layout(e, x, out);
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Position of row (y, z) of the copy; false when it does not fit in 64 bits.
bool row_at(const Layout& l, uint64_t y, uint64_t z, uint64_t* out) {
  uint64_t a = 0, b = 0;
  return mul_size(z, l.slice, &a) && mul_size(y, l.pitch, &b) && add_size(a, b, &a) &&
         add_size(l.origin, a, out);
}

// Host-visible bytes of one row; nullptr where the memory is unbacked.
CUresult row_bytes(const Layout& l, uint64_t at, uint64_t width, bool write, uint8_t** out) {
  if (l.array) {
    *out = backing_bytes(l.array->texels, at, write);
    return CUDA_SUCCESS;
  }
  return copy_end_bytes(at, l.device, width, write, out);
}

}  // namespace

CUresult copy_strided(const CopyEnd& src, const CopyEnd& dst, const CopyExtent& extent,
                      uint64_t* bytes, bool* device_local) {
  uint64_t total = 0;
  if (!mul_size(extent.width_bytes, extent.height, &total) ||
      !mul_size(total, extent.depth, &total)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> guard(driver().mu);
  Layout from, to;
  if (CUresult r = layout(src, extent, &from); r != CUDA_SUCCESS) return r;
  if (CUresult r = layout(dst, extent, &to); r != CUDA_SUCCESS) return r;
  *bytes = total;
  *device_local = (from.array || from.device) && (to.array || to.device);
  if (total == 0) return CUDA_SUCCESS;
  // Every row is checked before the first byte moves: a bad copy changes nothing.
  for (int pass = 0; pass < 2; ++pass) {
    const bool move = pass == 1;
    for (uint64_t z = 0; z < extent.depth; ++z) {
      for (uint64_t y = 0; y < extent.height; ++y) {
        uint64_t s = 0, d = 0;
        if (!row_at(from, y, z, &s) || !row_at(to, y, z, &d)) return CUDA_ERROR_INVALID_VALUE;
        uint8_t *in = nullptr, *out = nullptr;
        if (CUresult r = row_bytes(from, s, extent.width_bytes, false, &in); r != CUDA_SUCCESS)
          return r;
        if (CUresult r = row_bytes(to, d, extent.width_bytes, move, &out); r != CUDA_SUCCESS)
          return r;
        if (!move || out == nullptr) continue;  // unbacked destination: the bytes are not kept
        if (in == nullptr) {
          std::memset(out, 0, extent.width_bytes);
        } else {
          std::memmove(out, in, extent.width_bytes);
        }
      }
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace fakegpu
