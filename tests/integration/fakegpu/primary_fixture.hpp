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

}  // namespace fakegpu_test
