// Sizes never wrap: arrays past the device's texture limits are
// CUDA_ERROR_INVALID_VALUE, allocations no device can hold are
// CUDA_ERROR_OUT_OF_MEMORY, extents whose byte arithmetic does not fit in 64
// bits are CUDA_ERROR_INVALID_VALUE, and none of them charges the device.
#include <cuda.h>
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/integration/fakegpu/array_desc.hpp"
#include "tests/integration/fakegpu/cu_expect.hpp"
#include "tests/integration/fakegpu/primary_fixture.hpp"

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGranule = 2 * kMiB;

using fakegpu_test::shape;

class Sizes : public fakegpu_test::LeavesNothingCharged {
 protected:
  size_t used_since() const { return free_before_ - free_now(); }

  // Creates the array, checks its charge and destroys it.
  void expect_array(const CUDA_ARRAY3D_DESCRIPTOR& desc, uint64_t bytes) {
    CUarray a = nullptr;
    ASSERT_CU(CUDA_SUCCESS, cuArray3DCreate(&a, &desc));
    CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
    EXPECT_CU(CUDA_SUCCESS, cuArrayGetMemoryRequirements(&req, a, 0));
    EXPECT_EQ(req.size, bytes);
    EXPECT_EQ(used_since(), bytes);
    EXPECT_CU(CUDA_SUCCESS, cuArrayDestroy(a));
  }
  void expect_mipmap(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned levels, uint64_t bytes) {
    CUmipmappedArray m = nullptr;
    ASSERT_CU(CUDA_SUCCESS, cuMipmappedArrayCreate(&m, &desc, levels));
    CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
    EXPECT_CU(CUDA_SUCCESS, cuMipmappedArrayGetMemoryRequirements(&req, m, 0));
    EXPECT_EQ(req.size, bytes);
    EXPECT_EQ(used_since(), bytes);
    EXPECT_CU(CUDA_SUCCESS, cuMipmappedArrayDestroy(m));
  }
};

TEST_F(Sizes, DevicesReportAnH100sTextureLimits) {
  const std::pair<CUdevice_attribute, int> limits[] = {
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, 131072},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH, 131072},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT, 65536},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH, 16384},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT, 16384},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH, 16384},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE, 32768},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH, 32768},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS, 2048},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH, 32768},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH, 32768},
  };
  for (const auto& [attrib, value] : limits) {
    int v = 0;
    ASSERT_CU(CUDA_SUCCESS, cuDeviceGetAttribute(&v, attrib, 0));
    EXPECT_EQ(v, value) << "attribute " << attrib;
  }
}

TEST_F(Sizes, ArraysPastTheTextureLimitsAreInvalid) {
  const CUDA_ARRAY3D_DESCRIPTOR refused[] = {
      shape(1ull << 32, 1ull << 32, 0, 0, CU_AD_FORMAT_FLOAT, 4),  // 2^68 bytes: wrapped to 0
      shape(131073, 0, 0),                                         // 1D
      shape(131073, 1, 0),                                         // 2D
      shape(1, 65537, 0),
      shape(16385, 1, 1),  // 3D: past both sets of limits
      shape(1, 1, 32769),
      shape(8193, 1, 16385),
      shape(16, 0, 16),                          // a depth without a height is no shape
      shape(32769, 0, 1, CUDA_ARRAY3D_LAYERED),  // 1D layered
      shape(16, 0, 2049, CUDA_ARRAY3D_LAYERED),
      shape(16, 32769, 1, CUDA_ARRAY3D_LAYERED),  // 2D layered
      shape(16, 16, 0, CUDA_ARRAY3D_LAYERED),     // no layers
      shape(16, 32, 6, CUDA_ARRAY3D_CUBEMAP),     // not square
      shape(16, 16, 12, CUDA_ARRAY3D_CUBEMAP),    // one cubemap has six faces
      shape(16, 16, 14, CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_LAYERED),
      shape(32769, 32769, 6, CUDA_ARRAY3D_CUBEMAP),
  };
  for (const CUDA_ARRAY3D_DESCRIPTOR& d : refused) {
    CUarray a = nullptr;
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuArray3DCreate(&a, &d))
        << " for " << d.Width << " x " << d.Height << " x " << d.Depth << " flags " << d.Flags;
    CUmipmappedArray m = nullptr;
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMipmappedArrayCreate(&m, &d, 1))
        << " for " << d.Width << " x " << d.Height << " x " << d.Depth << " flags " << d.Flags;
  }
  CUDA_ARRAY_DESCRIPTOR wide{};
  wide.Width = 1ull << 32;
  wide.Height = 1ull << 32;
  wide.Format = CU_AD_FORMAT_FLOAT;
  wide.NumChannels = 1;
  CUarray a = nullptr;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuArrayCreate_v2(&a, &wide));
  // Mipmapped 1D and 2D arrays have their own, smaller limits.
  CUmipmappedArray m = nullptr;
  const CUDA_ARRAY3D_DESCRIPTOR mip_2d = shape(32769, 16, 0);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMipmappedArrayCreate(&m, &mip_2d, 1));
}

TEST_F(Sizes, ArraysAtTheLimitsAreMadeAndCharged) {
  expect_array(shape(131072, 65536, 0), 8ull << 30);  // 2D at its limits: 8 GiB
  expect_array(shape(8192, 1, 32768), 256 * kMiB);    // 3D within the alternate limits
  expect_array(shape(32768, 0, 2048, CUDA_ARRAY3D_LAYERED), 64 * kMiB);
  expect_array(shape(16, 16, 12, CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_LAYERED), kGranule);
  // A valid shape the device cannot hold (4 TiB) is out of memory, not charged.
  const CUDA_ARRAY3D_DESCRIPTOR cube = shape(16384, 16384, 16384);
  CUarray a = nullptr;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuArray3DCreate(&a, &cube));
}

TEST_F(Sizes, MipmapLevelsStopAtTheFullChainAndLayersDoNotShrink) {
  // 1024 x 1024 float4: 16 MiB + 4 MiB + 1 MiB + ... (11 levels) = 22 MiB in
  // 2 MiB pages, however many levels are asked for.
  const CUDA_ARRAY3D_DESCRIPTOR square = shape(1024, 1024, 0, 0, CU_AD_FORMAT_FLOAT, 4);
  expect_mipmap(square, UINT_MAX, 22 * kMiB);
  // 16 layers of 1024 x 1024 bytes: each level has all 16 layers (16 + 4 MiB).
  expect_mipmap(shape(1024, 1024, 16, CUDA_ARRAY3D_LAYERED), 2, 20 * kMiB);
}

TEST_F(Sizes, AllocationsNoDeviceHoldsAreOutOfMemory) {
  CUdeviceptr p = 0;
  size_t pitch = 0;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, SIZE_MAX));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, SIZE_MAX - 511));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocManaged(&p, SIZE_MAX, CU_MEM_ATTACH_GLOBAL));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocPitch(&p, &pitch, SIZE_MAX, 1, 4));
  // 2^33-byte rows times 2^31 + 1 rows: 2^64 + 2^33 bytes, 8 GiB once wrapped.
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocPitch(&p, &pitch, 1ull << 33, (1ull << 31) + 1, 4));

  CUstream s = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUmemoryPool pool = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuDeviceGetDefaultMemPool(&pool, 0));
  cuuint64_t reserved_before = 0, reserved_after = 0;
  ASSERT_CU(CUDA_SUCCESS,
            cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved_before));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocAsync(&p, SIZE_MAX, s));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY,
            cuMemAllocAsync(&p, SIZE_MAX - kMiB, s));  // grow wrapped to 0
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocFromPoolAsync(&p, SIZE_MAX - kMiB, pool, s));
  ASSERT_CU(CUDA_SUCCESS,
            cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved_after));
  EXPECT_EQ(reserved_after, reserved_before);
  // Under capture the size becomes a graph allocation node: refused the same way.
  ASSERT_CU(CUDA_SUCCESS, cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocAsync(&p, SIZE_MAX, s));
  CUgraph graph = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuStreamEndCapture(s, &graph));
  size_t nodes = 1;
  EXPECT_CU(CUDA_SUCCESS, cuGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 0u);
  EXPECT_CU(CUDA_SUCCESS, cuGraphDestroy(graph));
  EXPECT_CU(CUDA_SUCCESS, cuStreamDestroy(s));
}

TEST_F(Sizes, VirtualMemorySizesNeverWrap) {
  CUdeviceptr va = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAddressReserve(&va, ~0ull, 0, 0, 0));  // not granular
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAddressReserve(&va, 0ull - kGranule, 0, 0, 0));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemCreate(&h, 0ull - kGranule, &prop, 0));

  // A mapping at an offset whose end wraps past 2^64 to 0, inside the handle.
  ASSERT_CU(CUDA_SUCCESS, cuMemCreate(&h, kGranule, &prop, 0));
  ASSERT_CU(CUDA_SUCCESS, cuMemAddressReserve(&va, 2 * kGranule, 0, 0, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemMap(va, kGranule, 0ull - kGranule, h, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemMap(va, 2 * kGranule, 0, h, 0));  // larger than it
  // The reservation is still whole: a normal mapping works.
  ASSERT_CU(CUDA_SUCCESS, cuMemMap(va + kGranule, kGranule, 0, h, 0));
  EXPECT_CU(CUDA_SUCCESS, cuMemUnmap(va + kGranule, kGranule));
  EXPECT_CU(CUDA_SUCCESS, cuMemRelease(h));
  EXPECT_CU(CUDA_SUCCESS, cuMemAddressFree(va, 2 * kGranule));
}

TEST_F(Sizes, MemsetAndCopyExtentsThatWrapAreInvalid) {
  CUdeviceptr p = 0;
  ASSERT_CU(CUDA_SUCCESS, cuMemAlloc(&p, kMiB));
  // Row 1 at p + 2^63, row 2 wrapped back to p: the span once read as 1 byte.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD2D8(p, 1ull << 63, 7, 1, 3));
  // 2^62 + 1 words are 4 bytes once wrapped.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD32(p, 7, (1ull << 62) + 1));
  // Row 2^63 at pitch 4 is offset 0 once wrapped.
  uint32_t word = 0;
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = p;
  copy.srcY = 1ull << 63;
  copy.srcPitch = 4;
  copy.dstMemoryType = CU_MEMORYTYPE_HOST;
  copy.dstHost = &word;
  copy.dstPitch = sizeof word;
  copy.WidthInBytes = sizeof word;
  copy.Height = 1;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&copy));
  copy.srcY = 0;
  EXPECT_CU(CUDA_SUCCESS, cuMemcpy2D(&copy));
  EXPECT_CU(CUDA_SUCCESS, cuMemFree(p));
}

TEST_F(Sizes, PoolReleaseThresholdUint64MaxKeepsEverything) {
  CUmemoryPool pool = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuDeviceGetDefaultMemPool(&pool, 0));
  ASSERT_CU(CUDA_SUCCESS, cuMemPoolTrimTo(pool, 0));  // whatever earlier tests left
  free_before_ = free_now();
  CUstream s = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  cuuint64_t keep_all = UINT64_MAX;
  ASSERT_CU(CUDA_SUCCESS,
            cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
  CUdeviceptr p = 0;
  ASSERT_CU(CUDA_SUCCESS, cuMemAllocAsync(&p, 3 * kMiB, s));
  ASSERT_CU(CUDA_SUCCESS, cuMemFreeAsync(p, s));
  ASSERT_CU(CUDA_SUCCESS, cuStreamSynchronize(s));
  EXPECT_EQ(used_since(), 2 * kGranule);  // kept
  ASSERT_CU(CUDA_SUCCESS, cuMemPoolTrimTo(pool, SIZE_MAX));
  EXPECT_EQ(used_since(), 2 * kGranule);  // nothing above "keep everything" to trim
  ASSERT_CU(CUDA_SUCCESS, cuMemPoolTrimTo(pool, 0));
  EXPECT_EQ(used_since(), 0u);
  cuuint64_t none = 0;
  ASSERT_CU(CUDA_SUCCESS, cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &none));
  EXPECT_CU(CUDA_SUCCESS, cuStreamDestroy(s));
}

}  // namespace
