// Module and library memory: a loaded image takes device memory (its bytes
// plus its globals', in 2 MiB granules) until it is unloaded or its context
// destroyed, and its globals are device memory found by name.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/integration/fakegpu/cu_expect.hpp"
#include "tests/integration/fakegpu/cubin_builder.hpp"
#include "tests/integration/fakegpu/primary_fixture.hpp"

namespace {

constexpr uint64_t kGranule = 2ull << 20;

constexpr const char* kGlobalsPtx = R"(
.version 8.0
.target sm_80
.address_size 64
// .global .u32 commented_out;
.visible .global .align 4 .b8 buffer[64];
.visible .const .align 4 .u32 table[4][4] = {1, 2, 3, 4};
.global .v4 .f32 vec;
.extern .global .u32 elsewhere;
.visible .entry uses_them(.param .u64 p)
{
  .reg .b32 %r<2>;
  ret;
}
)";

uint64_t round_to_granule(uint64_t bytes) {
  return (bytes + kGranule - 1) / kGranule * kGranule;
}

std::string cubin(const std::vector<std::pair<std::string, uint64_t>>& objects) {
  return fakegpu_test::cubin({.objects = objects});
}

using fakegpu_test::fatbin;

class ModuleMemory : public fakegpu_test::OnPrimaryContext {
 protected:
  static uint64_t used() {
    size_t free = 0, total = 0;
    EXPECT_CU(CUDA_SUCCESS, cuMemGetInfo(&free, &total));
    return total - free;
  }
};

TEST_F(ModuleMemory, PtxGlobalsAreDeviceMemoryFoundByName) {
  CUmodule m = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&m, kGlobalsPtx));
  CUdeviceptr buffer = 0, table = 0, vec = 0;
  size_t bytes = 0;
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetGlobal(&buffer, &bytes, m, "buffer"));
  EXPECT_EQ(bytes, 64u);
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetGlobal(&table, &bytes, m, "table"));
  EXPECT_EQ(bytes, 64u);  // .u32 [4][4]
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetGlobal(&vec, nullptr, m, "vec"));
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetGlobal(nullptr, &bytes, m, "vec"));
  EXPECT_EQ(bytes, 16u);  // .v4 .f32
  EXPECT_NE(buffer, table);
  EXPECT_NE(table, vec);

  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuModuleGetGlobal(&vec, &bytes, m, "elsewhere"));  // .extern
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuModuleGetGlobal(&vec, &bytes, m, "commented_out"));
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuModuleGetGlobal(&vec, &bytes, m, "uses_them"));  // a kernel
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuModuleGetGlobal(nullptr, nullptr, m, "buffer"));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuModuleGetGlobal(&vec, &bytes, m, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE,
            cuModuleGetGlobal(&vec, &bytes, reinterpret_cast<CUmodule>(ctx_), "buffer"));

  // A global holds bytes like any device memory, and is not cuMemFree's to free.
  std::vector<uint8_t> in(64), out(64);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 3);
  ASSERT_CU(CUDA_SUCCESS, cuMemcpyHtoD(buffer, in.data(), in.size()));
  ASSERT_CU(CUDA_SUCCESS, cuMemcpyDtoH(out.data(), buffer, out.size()));
  EXPECT_EQ(in, out);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(buffer + 1, in.data(), in.size()));
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_CU(CUDA_SUCCESS, cuMemGetAddressRange(&base, &size, buffer + 10));
  EXPECT_EQ(base, buffer);
  EXPECT_EQ(size, 64u);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(buffer));

  ASSERT_CU(CUDA_SUCCESS, cuModuleUnload(m));
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, &size, buffer));
}

TEST_F(ModuleMemory, LoadingTakesTheImageAndItsGlobalsInGranules) {
  const uint64_t before = used();
  CUmodule small = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&small, kGlobalsPtx));
  EXPECT_EQ(used() - before, kGranule);
  // 3 MiB of globals and the image's bytes: two granules.
  const std::string big = cubin({{"weights", 3u << 20}, {"bias", 4096}});
  CUmodule large = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&large, big.data()));
  EXPECT_EQ(used() - before, kGranule + round_to_granule(big.size() + (3u << 20) + 4096));
  size_t bytes = 0;
  EXPECT_CU(CUDA_SUCCESS, cuModuleGetGlobal(nullptr, &bytes, large, "weights"));
  EXPECT_EQ(bytes, 3u << 20);
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuModuleGetGlobal(nullptr, &bytes, large, "kernel"));
  CUfunction kernel = nullptr;
  EXPECT_CU(CUDA_SUCCESS, cuModuleGetFunction(&kernel, large, "kernel"));
  ASSERT_CU(CUDA_SUCCESS, cuModuleUnload(large));
  ASSERT_CU(CUDA_SUCCESS, cuModuleUnload(small));
  EXPECT_EQ(used(), before);
}

TEST_F(ModuleMemory, FatbinGlobalsAreFoundWhereTheCubinIsNotCompressed) {
  const std::string elf = cubin({{"counter", 8}});
  for (bool compressed : {false, true}) {
    const std::string image = fatbin(elf, compressed);
    CUmodule m = nullptr;
    ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&m, image.data()));
    size_t bytes = 0;
    EXPECT_CU(compressed ? CUDA_ERROR_NOT_FOUND : CUDA_SUCCESS,
              cuModuleGetGlobal(nullptr, &bytes, m, "counter"));
    ASSERT_CU(CUDA_SUCCESS, cuModuleUnload(m));
  }
}

TEST_F(ModuleMemory, LibrariesTakeMemoryOnTheCurrentContextsDevice) {
  const uint64_t before = used();
  CUlibrary lib = nullptr;
  ASSERT_CU(CUDA_SUCCESS,
            cuLibraryLoadData(&lib, kGlobalsPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  EXPECT_EQ(used() - before, kGranule);
  CUdeviceptr table = 0;
  size_t bytes = 0;
  ASSERT_CU(CUDA_SUCCESS, cuLibraryGetGlobal(&table, &bytes, lib, "table"));
  EXPECT_EQ(bytes, 64u);
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuLibraryGetGlobal(&table, &bytes, lib, "missing"));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE,
            cuLibraryGetGlobal(&table, &bytes, reinterpret_cast<CUlibrary>(ctx_), "table"));
  ASSERT_CU(CUDA_SUCCESS, cuLibraryUnload(lib));
  EXPECT_EQ(used(), before);
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuLibraryGetGlobal(&table, &bytes, lib, "table"));

  // Loaded while no context is current (the runtime loads lazily, in a
  // context): the memory is taken at the first use in one.
  ASSERT_CU(CUDA_SUCCESS, cuCtxSetCurrent(nullptr));
  ASSERT_CU(CUDA_SUCCESS,
            cuLibraryLoadData(&lib, kGlobalsPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuLibraryGetGlobal(&table, &bytes, lib, "table"));
  ASSERT_CU(CUDA_SUCCESS, cuCtxSetCurrent(ctx_));
  EXPECT_EQ(used(), before);
  CUkernel kernel = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuLibraryGetKernel(&kernel, lib, "uses_them"));
  EXPECT_EQ(used() - before, kGranule);
  ASSERT_CU(CUDA_SUCCESS, cuLibraryGetGlobal(&table, &bytes, lib, "table"));
  ASSERT_CU(CUDA_SUCCESS, cuLibraryUnload(lib));
  EXPECT_EQ(used(), before);
}

TEST_F(ModuleMemory, AFullDeviceRefusesALoadAndAContextTakesItsModulesWithIt) {
  CUcontext own = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuCtxCreate(&own, nullptr, 0, 0));
  const uint64_t before = used();
  CUmodule m = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&m, kGlobalsPtx));
  EXPECT_EQ(used() - before, kGranule);

  // Fill the device to less than a granule.
  size_t free = 0, total = 0;
  ASSERT_CU(CUDA_SUCCESS, cuMemGetInfo(&free, &total));
  CUdeviceptr fill = 0;
  ASSERT_CU(CUDA_SUCCESS, cuMemAlloc(&fill, free - kGranule / 2));
  CUmodule refused = nullptr;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuModuleLoadData(&refused, kGlobalsPtx));
  CUlibrary lib = nullptr;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY,
            cuLibraryLoadData(&lib, kGlobalsPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  ASSERT_CU(CUDA_SUCCESS, cuMemFree(fill));

  ASSERT_CU(CUDA_SUCCESS, cuCtxDestroy(own));
  ASSERT_CU(CUDA_SUCCESS, cuCtxSetCurrent(ctx_));
  EXPECT_EQ(used(), before - (300u << 20));  // the context's overhead and its module
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuModuleUnload(m));
}

}  // namespace
