// Function attributes, occupancy and launch limits come from the kernel's
// recorded resources (cubin .nv.info records and sections, PTX directives and
// variables) and the device's multiprocessor limits.
#include <cuda.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/fakegpu/cu_expect.hpp"
#include "tests/integration/fakegpu/cubin_builder.hpp"
#include "tests/integration/fakegpu/primary_fixture.hpp"

namespace {

using fakegpu_test::CubinKernel;

// 64 registers, 4 KiB static shared memory, a 24-byte frame, launch bounds of 768.
const CubinKernel kBounded{"bounded", 64, 24, 768, 4096};

constexpr const char* kTiledPtx = R"(
.version 8.0
.target sm_80
.address_size 64
.visible .entry tiled(.param .u64 p)
.maxntid 128, 1, 1
.maxnreg 24
{
  .reg .b32 %r<4>;
  .shared .align 4 .b8 tile[2048];
  .local .align 8 .b8 spill[16];
  ret;
}
)";

class Occupancy : public fakegpu_test::OnPrimaryContext {
 protected:
  void SetUp() override {
    OnPrimaryContext::SetUp();
    image_ = fakegpu_test::cubin({.sm = 90, .kernels = {kBounded}});
    ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&module_, image_.data()));
    ASSERT_CU(CUDA_SUCCESS, cuModuleGetFunction(&fn_, module_, "bounded"));
  }
  void TearDown() override {
    EXPECT_CU(CUDA_SUCCESS, cuModuleUnload(module_));
    OnPrimaryContext::TearDown();
  }
  int attribute(CUfunction_attribute a, CUfunction f = nullptr) {
    int v = -1;
    EXPECT_CU(CUDA_SUCCESS, cuFuncGetAttribute(&v, a, f ? f : fn_));
    return v;
  }
  int blocks(int block, size_t dynamic, unsigned flags = CU_OCCUPANCY_DEFAULT) {
    int n = -1;
    EXPECT_CU(CUDA_SUCCESS,
              cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, fn_, block, dynamic, flags));
    return n;
  }
  static int sms() {
    int n = 0;
    EXPECT_CU(CUDA_SUCCESS, cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    return n;
  }
  std::string image_;
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
};

TEST_F(Occupancy, CubinAttributesAreTheRecordedResources) {
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_NUM_REGS), 64);
  // The section's first KiB is the driver's reservation, not the kernel's.
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES), 4096);
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES), 24);
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 768);
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_BINARY_VERSION), 90);
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), 48 * 1024 - 4096);
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT), -1);
  int v = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX, fn_));
}

TEST_F(Occupancy, RegistersLimitTheBlockSize) {
  const std::string image =
      fakegpu_test::cubin({.kernels = {{"greedy", 128}, {"hungry", 255}, {"lean", 16}}});
  CUmodule m = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&m, image.data()));
  CUfunction greedy = nullptr, hungry = nullptr, lean = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetFunction(&greedy, m, "greedy"));
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetFunction(&hungry, m, "hungry"));
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetFunction(&lean, m, "lean"));
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, greedy), 512);
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, hungry), 256);
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, lean), 1024);
  EXPECT_CU(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            cuLaunchKernel(hungry, 1, 1, 1, 512, 1, 1, 0, nullptr, nullptr, nullptr));
  EXPECT_CU(CUDA_SUCCESS, cuLaunchKernel(hungry, 1, 1, 1, 256, 1, 1, 0, nullptr, nullptr, nullptr));
  EXPECT_CU(CUDA_SUCCESS, cuCtxSynchronize());
  EXPECT_CU(CUDA_SUCCESS, cuModuleUnload(m));
}

TEST_F(Occupancy, ActiveBlocksFollowTheCalculatorRules) {
  // 64 registers: 2048 a warp, 32 warps an SM.
  EXPECT_EQ(blocks(256, 0), 4);
  EXPECT_EQ(blocks(512, 0), 2);
  EXPECT_EQ(blocks(768, 0), 1);
  EXPECT_EQ(blocks(800, 0), 0);  // past the launch bounds
  // 4096 static + 1024 reserved + 40000 dynamic = 45120 bytes a block: 5 fit, registers allow 16.
  EXPECT_EQ(blocks(64, 40000), 5);
  EXPECT_EQ(blocks(64, 48 * 1024 - 4096 + 1), 0);  // more than the function may use
  int plain = -1;
  ASSERT_CU(CUDA_SUCCESS, cuOccupancyMaxActiveBlocksPerMultiprocessor(&plain, fn_, 64, 40000));
  EXPECT_EQ(plain, 5);
  // Partitioned global caching does not exist from compute capability 7.0 on.
  EXPECT_EQ(blocks(256, 0, CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE), 4);
}

TEST_F(Occupancy, OptingInToMoreSharedMemoryChangesOccupancyAndLaunches) {
  const unsigned big = 100 * 1024;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuLaunchKernel(fn_, 1, 1, 1, 64, 1, 1, big, nullptr, nullptr, nullptr));
  EXPECT_CU(CUDA_SUCCESS,
            cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, big));
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), static_cast<int>(big));
  EXPECT_EQ(blocks(64, big), 2);  // 4096 + 1024 + 102400 = 107520 bytes a block
  EXPECT_CU(CUDA_SUCCESS, cuLaunchKernel(fn_, 1, 1, 1, 64, 1, 1, big, nullptr, nullptr, nullptr));
  EXPECT_CU(CUDA_SUCCESS, cuCtxSynchronize());
  // No more than the opt-in limit (227 KiB) less the static part; read-only attributes stay.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               227 * 1024 - 4096 + 1));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_NUM_REGS, 8));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101));
}

std::vector<int> g_asked;
size_t over_the_limit_above_256(int block) {
  g_asked.push_back(block);
  return block > 256 ? 48 * 1024 : 0;
}

TEST_F(Occupancy, PotentialBlockSizeAsksTheCallbackForEverySize) {
  int grid = 0, block = 0;
  ASSERT_CU(CUDA_SUCCESS, cuOccupancyMaxPotentialBlockSize(&grid, &block, fn_, nullptr, 0, 0));
  EXPECT_EQ(block, 512);  // 2 blocks of 512 keep 1024 threads, the most 64 registers allow
  EXPECT_EQ(grid, 2 * sms());
  g_asked.clear();
  ASSERT_CU(CUDA_SUCCESS, cuOccupancyMaxPotentialBlockSizeWithFlags(
                              &grid, &block, fn_, over_the_limit_above_256, 12345, 0,
                              CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE));
  EXPECT_EQ(block, 256);
  EXPECT_EQ(grid, 4 * sms());
  ASSERT_EQ(g_asked.size(), 24u);  // 768 down to 32 in warp steps
  EXPECT_EQ(g_asked.front(), 768);
  EXPECT_EQ(g_asked.back(), 32);
  ASSERT_CU(CUDA_SUCCESS, cuOccupancyMaxPotentialBlockSize(&grid, &block, fn_, nullptr, 0, 100));
  EXPECT_EQ(block, 64);  // 100 -> 8 blocks (800 threads), 96 -> 10 (960), 64 -> 16 (1024)
}

TEST_F(Occupancy, BadArgumentsAreInvalidValues) {
  int n = 0, grid = 0, block = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, fn_, 64, 0, 2));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn_, 0, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuOccupancyMaxActiveBlocksPerMultiprocessor(nullptr, fn_, 64, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuOccupancyMaxActiveBlocksPerMultiprocessor(
                                          &n, reinterpret_cast<CUfunction>(&n), 64, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuOccupancyMaxPotentialBlockSize(nullptr, &block, fn_, nullptr, 0, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuOccupancyMaxPotentialBlockSize(&grid, &block, fn_, nullptr, 0, -1));
}

TEST_F(Occupancy, PtxKernelsTakeTheirDirectivesAndVariables) {
  CUlibrary lib = nullptr;
  ASSERT_CU(CUDA_SUCCESS,
            cuLibraryLoadData(&lib, kTiledPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuLibraryGetKernel(&k, lib, "tiled"));
  auto kernel_attribute = [&](CUfunction_attribute a, CUdevice dev) {
    int v = -1;
    EXPECT_CU(CUDA_SUCCESS, cuKernelGetAttribute(&v, a, k, dev));
    return v;
  };
  EXPECT_EQ(kernel_attribute(CU_FUNC_ATTRIBUTE_NUM_REGS, 0), 24);  // .maxnreg caps the default
  EXPECT_EQ(kernel_attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0), 128);
  EXPECT_EQ(kernel_attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, 0), 2048);
  EXPECT_EQ(kernel_attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, 0), 16);
  EXPECT_EQ(kernel_attribute(CU_FUNC_ATTRIBUTE_PTX_VERSION, 0), 80);
  EXPECT_EQ(kernel_attribute(CU_FUNC_ATTRIBUTE_BINARY_VERSION, 0), 90);  // JIT-compiled for an H100
  EXPECT_EQ(kernel_attribute(CU_FUNC_ATTRIBUTE_BINARY_VERSION, 1), 75);  // and for a T4
  int via_function = -1;
  ASSERT_CU(CUDA_SUCCESS, cuFuncGetAttribute(&via_function, CU_FUNC_ATTRIBUTE_NUM_REGS,
                                             reinterpret_cast<CUfunction>(k)));
  EXPECT_EQ(via_function, 24);
  ASSERT_CU(CUDA_SUCCESS, cuLibraryUnload(lib));
}

TEST_F(Occupancy, CompressedFatbinKernelsTakeTheDefaults) {
  const std::string packed =
      fakegpu_test::fatbin(fakegpu_test::cubin({.kernels = {kBounded}}), true);
  CUmodule m = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&m, packed.data()));
  CUfunction f = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetFunction(&f, m, "bounded"));
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_NUM_REGS, f), 32);
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), 1024);
  const std::string plain =
      fakegpu_test::fatbin(fakegpu_test::cubin({.kernels = {kBounded}}), false);
  CUmodule m2 = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&m2, plain.data()));
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetFunction(&f, m2, "bounded"));
  EXPECT_EQ(attribute(CU_FUNC_ATTRIBUTE_NUM_REGS, f), 64);
  EXPECT_CU(CUDA_SUCCESS, cuModuleUnload(m));
  EXPECT_CU(CUDA_SUCCESS, cuModuleUnload(m2));
}

TEST(DeviceLimits, FollowTheComputeCapability) {
  ASSERT_CU(CUDA_SUCCESS, cuInit(0));
  auto attr = [](CUdevice_attribute a, CUdevice d) {
    int v = -1;
    EXPECT_CU(CUDA_SUCCESS, cuDeviceGetAttribute(&v, a, d));
    return v;
  };
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 0), 2048);  // H100
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 0), 233472);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 0), 1024);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 1), 1024);  // T4
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 1), 16);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 1), 65536);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 1), 0);
}

}  // namespace
