// Strided copies into and out of CUDA arrays (cuMemcpy2D, cuMemcpy3D and
// their async forms): the bytes arrive where the driver's addressing puts
// them, and every request the driver documents as invalid is refused before
// a byte moves.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "tests/integration/fakegpu/array_desc.hpp"
#include "tests/integration/fakegpu/cu_expect.hpp"
#include "tests/integration/fakegpu/primary_fixture.hpp"

namespace {

// shape(width, height, depth, flags, format, channels)
using fakegpu_test::shape;

std::vector<uint8_t> counting(size_t n, uint8_t first = 1) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

CUDA_MEMCPY2D host_to_array(const void* host, size_t pitch, CUarray array, size_t width,
                            size_t height) {
  return {.srcMemoryType = CU_MEMORYTYPE_HOST,
          .srcHost = host,
          .srcPitch = pitch,
          .dstMemoryType = CU_MEMORYTYPE_ARRAY,
          .dstArray = array,
          .WidthInBytes = width,
          .Height = height};
}

CUDA_MEMCPY2D array_to_host(CUarray array, void* host, size_t pitch, size_t width, size_t height) {
  return {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
          .srcArray = array,
          .dstMemoryType = CU_MEMORYTYPE_HOST,
          .dstHost = host,
          .dstPitch = pitch,
          .WidthInBytes = width,
          .Height = height};
}

// w bytes x h rows x d slices between host memory (pitch, slice height) and an array.
CUDA_MEMCPY3D host_to_array(const void* host, size_t pitch, size_t height, CUarray array, size_t w,
                            size_t h, size_t d) {
  return {.srcMemoryType = CU_MEMORYTYPE_HOST,
          .srcHost = host,
          .srcPitch = pitch,
          .srcHeight = height,
          .dstMemoryType = CU_MEMORYTYPE_ARRAY,
          .dstArray = array,
          .WidthInBytes = w,
          .Height = h,
          .Depth = d};
}

CUDA_MEMCPY3D array_to_host(CUarray array, void* host, size_t pitch, size_t height, size_t w,
                            size_t h, size_t d) {
  return {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
          .srcArray = array,
          .dstMemoryType = CU_MEMORYTYPE_HOST,
          .dstHost = host,
          .dstPitch = pitch,
          .dstHeight = height,
          .WidthInBytes = w,
          .Height = h,
          .Depth = d};
}

class ArrayCopy : public fakegpu_test::OnPrimaryContext {
 protected:
  void TearDown() override {
    for (CUarray a : arrays_) EXPECT_CU(CUDA_SUCCESS, cuArrayDestroy(a));
    OnPrimaryContext::TearDown();
  }
  CUarray make(const CUDA_ARRAY3D_DESCRIPTOR& desc) {
    CUarray a = nullptr;
    EXPECT_CU(CUDA_SUCCESS, cuArray3DCreate(&a, &desc));
    arrays_.push_back(a);
    return a;
  }
  std::vector<CUarray> arrays_;
};

TEST_F(ArrayCopy, TwoDimensionalRoundTripThroughArrayAndPitchedMemory) {
  // 16 x 8 texels of float2 (8 bytes each): rows of 128 bytes.
  CUarray a = make(shape(16, 8, 0, 0, CU_AD_FORMAT_FLOAT, 2));
  const auto in = counting(128 * 8);
  CUDA_MEMCPY2D up = host_to_array(in.data(), 128, a, 128, 8);
  ASSERT_CU(CUDA_SUCCESS, cuMemcpy2D(&up));

  // Array -> pitched device memory -> host, through a sub-rectangle at
  // texel (2, 3) of the array: 4 texels wide, 5 rows.
  CUdeviceptr d = 0;
  size_t pitch = 0;
  ASSERT_CU(CUDA_SUCCESS, cuMemAllocPitch(&d, &pitch, 32, 5, 4));
  CUDA_MEMCPY2D across{};
  across.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  across.srcArray = a;
  across.srcXInBytes = 2 * 8;
  across.srcY = 3;
  across.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  across.dstDevice = d;
  across.dstPitch = pitch;
  across.WidthInBytes = 32;
  across.Height = 5;
  ASSERT_CU(CUDA_SUCCESS, cuMemcpy2D(&across));
  std::vector<uint8_t> out(32 * 5);
  CUDA_MEMCPY2D down{};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = d;
  down.srcPitch = pitch;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = out.data();
  down.dstPitch = 32;
  down.WidthInBytes = 32;
  down.Height = 5;
  ASSERT_CU(CUDA_SUCCESS, cuMemcpy2D(&down));
  for (size_t y = 0; y < 5; ++y) {
    for (size_t x = 0; x < 32; ++x)
      ASSERT_EQ(out[y * 32 + x], in[(y + 3) * 128 + 16 + x]) << "row " << y << " byte " << x;
  }
  EXPECT_CU(CUDA_SUCCESS, cuMemFree(d));
}

TEST_F(ArrayCopy, ThreeDimensionalBoxesAndArrayToArray) {
  // 8 x 4 x 3 texels of ushort2 (4 bytes): rows of 32 bytes, slices of 128.
  CUarray a = make(shape(8, 4, 3, 0, CU_AD_FORMAT_UNSIGNED_INT16, 2));
  CUarray b = make(shape(8, 4, 3, 0, CU_AD_FORMAT_UNSIGNED_INT16, 2));
  const auto in = counting(32 * 4 * 3);
  CUDA_MEMCPY3D up = host_to_array(in.data(), 32, 4, a, 32, 4, 3);
  ASSERT_CU(CUDA_SUCCESS, cuMemcpy3D(&up));
  CUDA_MEMCPY3D across = host_to_array(nullptr, 0, 0, b, 32, 4, 3);
  across.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  across.srcArray = a;
  ASSERT_CU(CUDA_SUCCESS, cuMemcpy3D(&across));

  // The box at texel (1, 2, 1), 3 x 2 x 2 texels, into a host buffer with a
  // wider pitch and taller slices, asynchronously on a stream.
  CUstream s = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::vector<uint8_t> out(16 * 3 * 2, 0xEE);
  CUDA_MEMCPY3D down = array_to_host(b, out.data(), 16, 3, 12, 2, 2);
  down.srcXInBytes = 4;
  down.srcY = 2;
  down.srcZ = 1;
  ASSERT_CU(CUDA_SUCCESS, cuMemcpy3DAsync(&down, s));
  ASSERT_CU(CUDA_SUCCESS, cuStreamSynchronize(s));
  for (size_t z = 0; z < 2; ++z) {
    for (size_t y = 0; y < 3; ++y) {
      for (size_t x = 0; x < 16; ++x) {
        const uint8_t got = out[(z * 3 + y) * 16 + x];
        const uint8_t want =
            (y < 2 && x < 12) ? in[(z + 1) * 128 + (y + 2) * 32 + 4 + x] : uint8_t{0xEE};
        ASSERT_EQ(got, want) << "z " << z << " y " << y << " x " << x;
      }
    }
  }
  EXPECT_CU(CUDA_SUCCESS, cuStreamDestroy(s));
}

TEST_F(ArrayCopy, LayeredArraysCopyLayerByLayer) {
  // A 1D layered array: rows of 64 bytes, one row per layer, 4 layers.
  CUarray a = make(shape(64, 0, 4, CUDA_ARRAY3D_LAYERED, CU_AD_FORMAT_UNSIGNED_INT8, 1));
  const auto in = counting(64 * 4);
  CUDA_MEMCPY2D two_rows = host_to_array(in.data(), 64, a, 64, 2);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&two_rows));  // a layer has one row
  CUDA_MEMCPY3D up = host_to_array(in.data(), 64, 1, a, 64, 1, 4);
  ASSERT_CU(CUDA_SUCCESS, cuMemcpy3D(&up));
  std::vector<uint8_t> layer(64);
  CUDA_MEMCPY3D down = array_to_host(a, layer.data(), 64, 0, 64, 1, 1);
  down.srcZ = 3;
  ASSERT_CU(CUDA_SUCCESS, cuMemcpy3D(&down));
  EXPECT_EQ(layer, std::vector<uint8_t>(in.begin() + 192, in.end()));
}

TEST_F(ArrayCopy, InvalidRequestsAreRefusedAndMoveNothing) {
  // 8 x 4 texels of float (4 bytes): rows of 32 bytes.
  CUarray a = make(shape(8, 4, 0, 0, CU_AD_FORMAT_FLOAT, 1));
  const std::vector<uint8_t> zeros(32 * 4, 0);
  CUDA_MEMCPY2D clear = host_to_array(zeros.data(), 32, a, 32, 4);
  ASSERT_CU(CUDA_SUCCESS, cuMemcpy2D(&clear));
  const auto in = counting(64 * 8);
  const CUDA_MEMCPY2D good = host_to_array(in.data(), 64, a, 32, 4);

  auto refused = [&](const char* what, auto change) {
    CUDA_MEMCPY2D c = good;
    change(c);
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&c)) << what;
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2DAsync(&c, nullptr)) << what;
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2DUnaligned(&c)) << what;
  };
  refused("x not a whole texel", [](CUDA_MEMCPY2D& c) { c.dstXInBytes = 2, c.WidthInBytes = 8; });
  refused("past the array's width", [](CUDA_MEMCPY2D& c) { c.dstXInBytes = 4; });
  refused("past the array's height", [](CUDA_MEMCPY2D& c) { c.dstY = 1; });
  refused("a pitch below the row", [](CUDA_MEMCPY2D& c) { c.srcPitch = 31; });
  refused("a pitch below x + width", [](CUDA_MEMCPY2D& c) { c.srcXInBytes = 40; });
  refused("a pitch past CU_DEVICE_ATTRIBUTE_MAX_PITCH",
          [](CUDA_MEMCPY2D& c) { c.srcPitch = 1ull << 31; });
  refused("an unknown memory type",
          [](CUDA_MEMCPY2D& c) { c.srcMemoryType = static_cast<CUmemorytype>(7); });
  refused("a garbage array", [](CUDA_MEMCPY2D& c) { c.dstArray = reinterpret_cast<CUarray>(16); });
  refused("a position that wraps", [](CUDA_MEMCPY2D& c) { c.dstY = SIZE_MAX; });
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(nullptr));

  CUdeviceptr d = 0;
  ASSERT_CU(CUDA_SUCCESS, cuMemAlloc(&d, 64));
  CUDA_MEMCPY2D past_device = good;
  past_device.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  past_device.srcDevice = d;
  past_device.srcPitch = 32;  // rows 2 and 3 lie past the allocation
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&past_device));
  EXPECT_CU(CUDA_SUCCESS, cuMemFree(d));

  // None of that moved a byte into the array.
  std::vector<uint8_t> out(32 * 4, 0xEE);
  CUDA_MEMCPY2D back = array_to_host(a, out.data(), 32, 32, 4);
  ASSERT_CU(CUDA_SUCCESS, cuMemcpy2D(&back));
  EXPECT_EQ(out, zeros);

  CUarray gone = nullptr;
  const CUDA_ARRAY3D_DESCRIPTOR desc = shape(8, 4, 0, 0, CU_AD_FORMAT_FLOAT, 1);
  ASSERT_CU(CUDA_SUCCESS, cuArray3DCreate(&gone, &desc));
  ASSERT_CU(CUDA_SUCCESS, cuArrayDestroy(gone));
  CUDA_MEMCPY2D destroyed = good;
  destroyed.dstArray = gone;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&destroyed));
}

TEST_F(ArrayCopy, InvalidThreeDimensionalRequests) {
  CUarray a = make(shape(8, 4, 2, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4));  // rows of 32 bytes
  const auto in = counting(32 * 4 * 2);
  const CUDA_MEMCPY3D good = host_to_array(in.data(), 32, 4, a, 32, 4, 2);
  ASSERT_CU(CUDA_SUCCESS, cuMemcpy3D(&good));

  auto refused = [&](const char* what, auto change) {
    CUDA_MEMCPY3D c = good;
    change(c);
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy3D(&c)) << what;
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy3DAsync(&c, nullptr)) << what;
  };
  refused("past the array's depth", [](CUDA_MEMCPY3D& c) { c.dstZ = 1; });
  refused("a slice height below the rows", [](CUDA_MEMCPY3D& c) { c.srcHeight = 3; });
  refused("a source mipmap level", [](CUDA_MEMCPY3D& c) { c.srcLOD = 1; });
  refused("a destination mipmap level", [](CUDA_MEMCPY3D& c) { c.dstLOD = 1; });
  refused("reserved0 set", [&](CUDA_MEMCPY3D& c) { c.reserved0 = &c; });
  refused("reserved1 set", [&](CUDA_MEMCPY3D& c) { c.reserved1 = &c; });
  refused("a slice that wraps", [](CUDA_MEMCPY3D& c) {
    c.srcHeight = SIZE_MAX;
    c.srcZ = 2;
    c.Depth = 1;
  });
  // One slice needs no slice height, as cuda.h says.
  CUDA_MEMCPY3D one_slice = good;
  one_slice.srcHeight = 0;
  one_slice.Depth = 1;
  EXPECT_CU(CUDA_SUCCESS, cuMemcpy3D(&one_slice));
}

TEST_F(ArrayCopy, NeedsAContext) {
  CUarray a = make(shape(8, 4, 0, 0, CU_AD_FORMAT_FLOAT, 1));
  const auto in = counting(32 * 4);
  CUDA_MEMCPY2D c = host_to_array(in.data(), 32, a, 32, 4);
  ASSERT_CU(CUDA_SUCCESS, cuCtxSetCurrent(nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuMemcpy2D(&c));
  ASSERT_CU(CUDA_SUCCESS, cuCtxSetCurrent(ctx_));
}

}  // namespace
