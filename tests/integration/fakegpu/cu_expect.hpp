#pragma once
// Driver results compared by name, so a failing expectation prints
// CUDA_ERROR_INVALID_VALUE rather than 1.
#include <cuda.h>
#include <gtest/gtest.h>

#include <string>

namespace fakegpu_test {

inline std::string error_name(CUresult r) {
  const char* name = nullptr;
  return cuGetErrorName(r, &name) == CUDA_SUCCESS ? name : "CUresult " + std::to_string(r);
}

}  // namespace fakegpu_test

#define EXPECT_CU(expected, call) \
  EXPECT_EQ(fakegpu_test::error_name(call), fakegpu_test::error_name(expected)) << #call
#define ASSERT_CU(expected, call) \
  ASSERT_EQ(fakegpu_test::error_name(call), fakegpu_test::error_name(expected)) << #call
