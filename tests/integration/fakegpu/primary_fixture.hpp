#pragma once
// A test that runs in device 0's primary context, retained for the test and
// current on its thread.
#include <cuda.h>
#include <gtest/gtest.h>

#include "tests/integration/fakegpu/cu_expect.hpp"

namespace fakegpu_test {

class OnPrimaryContext : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(CUDA_SUCCESS, cuInit(0));
    ASSERT_CU(CUDA_SUCCESS, cuDevicePrimaryCtxRetain(&ctx_, 0));
    ASSERT_CU(CUDA_SUCCESS, cuCtxSetCurrent(ctx_));
  }
  void TearDown() override {
    EXPECT_CU(CUDA_SUCCESS, cuCtxSetCurrent(ctx_));
    EXPECT_CU(CUDA_SUCCESS, cuDevicePrimaryCtxRelease(0));
  }
  CUcontext ctx_ = nullptr;
};

// A suite that keeps device 0's primary context for its whole life and
// checks that each test, whatever it refused or released, left nothing
// charged on the device.
class LeavesNothingCharged : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
  }
  void SetUp() override {
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    free_before_ = free_now();
  }
  void TearDown() override { EXPECT_EQ(free_now(), free_before_); }
  static size_t free_now() {
    size_t free = 0, total = 0;
    EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
    return free;
  }
  static inline CUcontext ctx_ = nullptr;
  size_t free_before_ = 0;
};

}  // namespace fakegpu_test
