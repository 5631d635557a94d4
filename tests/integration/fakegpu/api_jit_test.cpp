// JIT options: the log buffers a caller passes are always left holding a
// NUL-terminated string within their sizes; kernels' attributes through their
// CUkernel handles.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "tests/integration/fakegpu/noop_ptx.hpp"

namespace {

struct Logs {
  char info[16];
  char error[128];
  CUjit_option options[4] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                             CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[4];
  explicit Logs(unsigned error_size) {
    std::memset(info, 'X', sizeof info);
    std::memset(error, 'X', sizeof error);
    values[0] = info;
    values[1] = reinterpret_cast<void*>(uintptr_t{sizeof info});
    values[2] = error;
    values[3] = reinterpret_cast<void*>(uintptr_t{error_size});
  }
  unsigned filled(int i) const {
    return static_cast<unsigned>(reinterpret_cast<uintptr_t>(values[i]));
  }
};

class Jit : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  }
  void TearDown() override { cuDevicePrimaryCtxRelease(0); }
  CUcontext ctx_ = nullptr;
};

TEST_F(Jit, ModuleLoadLeavesTerminatedLogs) {
  Logs logs(sizeof Logs::error);
  CUmodule m = nullptr;
  ASSERT_EQ(cuModuleLoadDataEx(&m, fakegpu_test::kNoopPtx, 4, logs.options, logs.values),
            CUDA_SUCCESS);
  EXPECT_STREQ(logs.info, "");
  EXPECT_STREQ(logs.error, "");
  EXPECT_EQ(logs.filled(1), 1u);
  ASSERT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
}

TEST_F(Jit, AFailedLoadExplainsItselfWithinTheErrorLogsSize) {
  Logs logs(8);
  CUmodule m = nullptr;
  ASSERT_EQ(cuModuleLoadDataEx(&m, "not ptx", 4, logs.options, logs.values),
            CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(std::strlen(logs.error), 7u);  // truncated to the 8 bytes given, NUL included
  EXPECT_EQ(logs.error[8], 'X');           // nothing written past them
  EXPECT_EQ(logs.filled(3), 8u);
  EXPECT_STREQ(logs.info, "");
}

TEST_F(Jit, LibraryLoadFillsLogsAndKernelsAnswerAttributes) {
  Logs logs(sizeof Logs::error);
  CUlibrary lib = nullptr;
  ASSERT_EQ(cuLibraryLoadData(&lib, "not ptx", logs.options, logs.values, 4, nullptr, nullptr, 0),
            CUDA_ERROR_INVALID_IMAGE);
  EXPECT_NE(std::strlen(logs.error), 0u);
  EXPECT_LT(std::strlen(logs.error), sizeof logs.error);
  ASSERT_EQ(
      cuLibraryLoadData(&lib, fakegpu_test::kNoopPtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
      CUDA_SUCCESS);
  CUkernel k = nullptr;
  ASSERT_EQ(cuLibraryGetKernel(&k, lib, "noop"), CUDA_SUCCESS);
  int threads = 0, via_function = -1;
  ASSERT_EQ(cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, 0),
            CUDA_SUCCESS);
  ASSERT_EQ(cuFuncGetAttribute(&via_function, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                               reinterpret_cast<CUfunction>(k)),
            CUDA_SUCCESS);
  EXPECT_EQ(threads, via_function);
  EXPECT_GT(threads, 0);
  EXPECT_EQ(cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, 99),
            CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(cuLibraryUnload(lib), CUDA_SUCCESS);
  EXPECT_EQ(cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, 0),
            CUDA_ERROR_INVALID_HANDLE);
}

}  // namespace
