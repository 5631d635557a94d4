// CUDA_VISIBLE_DEVICES applied to NVML's physical list (shim/visible_devices).
#include "shim/devices/visible_devices.hpp"

#include <gtest/gtest.h>

namespace cushare::shim {
namespace {

const std::vector<std::string> kGpus = {
    "GPU-8c1f0a2e-0000-1111-2222-333333333333",
    "GPU-8c2b0000-aaaa-bbbb-cccc-dddddddddddd",
    "GPU-f00d0000-aaaa-bbbb-cccc-eeeeeeeeeeee",
};

std::vector<unsigned> order(const char* v) {
  return cuda_visible_order(v, kGpus);
}

TEST(ShimVisibleDevices, UnsetMeansEveryGpuInOrder) {
  EXPECT_EQ(order(nullptr), (std::vector<unsigned>{0, 1, 2}));
}

TEST(ShimVisibleDevices, IndicesSelectAndReorder) {
  EXPECT_EQ(order("2,0"), (std::vector<unsigned>{2, 0}));
  EXPECT_EQ(order(" 1 , 2 "), (std::vector<unsigned>{1, 2}));
  EXPECT_EQ(order("0002"), (std::vector<unsigned>{2}));
}

TEST(ShimVisibleDevices, UuidsAndUniquePrefixes) {
  EXPECT_EQ(order("GPU-f00d0000-aaaa-bbbb-cccc-eeeeeeeeeeee"), (std::vector<unsigned>{2}));
  EXPECT_EQ(order("GPU-8c2,GPU-8c1"), (std::vector<unsigned>{1, 0}));
  EXPECT_EQ(order("GPU-f,1"), (std::vector<unsigned>{2, 1}));
}

TEST(ShimVisibleDevices, TheListEndsAtTheFirstBadEntry) {
  EXPECT_EQ(order(""), (std::vector<unsigned>{}));
  EXPECT_EQ(order("1,7,0"), (std::vector<unsigned>{1}));         // out of range
  EXPECT_EQ(order("0,GPU-8c,2"), (std::vector<unsigned>{0}));    // ambiguous prefix
  EXPECT_EQ(order("2,GPU-ffff,0"), (std::vector<unsigned>{2}));  // unknown UUID
  EXPECT_EQ(order("1,1,2"), (std::vector<unsigned>{1}));         // repeated
  EXPECT_EQ(order("0,-1,2"), (std::vector<unsigned>{0}));        // malformed
  EXPECT_EQ(order("MIG-0000,1"), (std::vector<unsigned>{}));     // MIG: not a GPU
  EXPECT_EQ(order("GPU-"), (std::vector<unsigned>{}));           // empty prefix
  EXPECT_EQ(order("0,,1"), (std::vector<unsigned>{0}));          // empty entry
  EXPECT_EQ(order("99999999999"), (std::vector<unsigned>{}));    // no overflow
}

}  // namespace
}  // namespace cushare::shim
