// The JIT linker: PTX, cubin and fatbin inputs link into a cubin that
// cuModuleLoadData and cuLibraryLoadData accept with every input's kernels
// and globals; extern functions and globals resolve across inputs; logs fill
// the caller's buffers; bad inputs and handles get the documented errors.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "tests/integration/fakegpu/cu_expect.hpp"
#include "tests/integration/fakegpu/cubin_builder.hpp"
#include "tests/integration/fakegpu/primary_fixture.hpp"

namespace {

constexpr const char* kCallerPtx = R"(
.version 8.0
.target sm_80
.address_size 64
.extern .func (.param .b32 r) helper(.param .b32 x);
.extern .global .align 4 .u32 counter;
.visible .entry caller(.param .u64 p)
{
  .reg .b32 %r<3>;
  ret;
}
)";

constexpr const char* kHelperPtx = R"(
.version 8.0
.target sm_80
.address_size 64
.visible .global .align 4 .u32 counter;
.visible .func (.param .b32 r) helper(.param .b32 x)
{
  ret;
}
)";

constexpr const char* kMissingPtx = R"(
.version 8.0
.target sm_80
.address_size 64
.extern .func missing();
.visible .entry lonely()
{
  ret;
}
)";

class Link : public fakegpu_test::OnPrimaryContext {
 protected:
  void SetUp() override {
    OnPrimaryContext::SetUp();
    std::memset(info_, 'X', sizeof info_);
    std::memset(error_, 'X', sizeof error_);
    values_[0] = info_;
    values_[1] = reinterpret_cast<void*>(uintptr_t{sizeof info_});
    values_[2] = error_;
    values_[3] = reinterpret_cast<void*>(uintptr_t{sizeof error_});
    values_[4] = nullptr;
    ASSERT_CU(CUDA_SUCCESS, cuLinkCreate(5, options_, values_, &link_));
  }
  void TearDown() override {
    if (link_ != nullptr) {
      EXPECT_CU(CUDA_SUCCESS, cuLinkDestroy(link_));
    }
    OnPrimaryContext::TearDown();
  }
  CUresult add_ptx(const char* ptx, const char* name) {
    return cuLinkAddData(link_, CU_JIT_INPUT_PTX, const_cast<char*>(ptx), std::strlen(ptx) + 1,
                         name, 0, nullptr, nullptr);
  }
  CUresult add(CUjitInputType type, const std::string& bytes, const char* name) {
    return cuLinkAddData(link_, type, const_cast<char*>(bytes.data()), bytes.size(), name, 0,
                         nullptr, nullptr);
  }
  unsigned error_written() const {
    return static_cast<unsigned>(reinterpret_cast<uintptr_t>(values_[3]));
  }
  CUlinkState link_ = nullptr;
  char info_[32];
  char error_[256];
  CUjit_option options_[5] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                              CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                              CU_JIT_WALL_TIME};
  void* values_[5];
};

TEST_F(Link, PtxInputsResolveEachOthersExternsIntoALoadableCubin) {
  ASSERT_CU(CUDA_SUCCESS, add_ptx(kCallerPtx, "caller.ptx"));
  ASSERT_CU(CUDA_SUCCESS, add_ptx(kHelperPtx, "helper.ptx"));
  void* image = nullptr;
  size_t size = 0;
  ASSERT_CU(CUDA_SUCCESS, cuLinkComplete(link_, &image, &size));
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(std::memcmp(image,
                        "\x7f"
                        "ELF",
                        4),
            0);
  EXPECT_GT(size, 64u);
  EXPECT_STREQ(error_, "");
  EXPECT_STREQ(info_, "");
  float ms = -1;
  std::memcpy(&ms, &values_[4], sizeof ms);
  EXPECT_GE(ms, 0.0f);

  CUmodule m = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&m, image));
  CUfunction f = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetFunction(&f, m, "caller"));
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuModuleGetFunction(&f, m, "nothing"));
  CUdeviceptr counter = 0;
  size_t bytes = 0;
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetGlobal(&counter, &bytes, m, "counter"));
  EXPECT_EQ(bytes, 4u);
  ASSERT_CU(CUDA_SUCCESS, cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
  EXPECT_CU(CUDA_SUCCESS, cuCtxSynchronize());
  EXPECT_CU(CUDA_SUCCESS, cuModuleUnload(m));

  // The same image as a library, after the link state is gone (the image was copied at load).
  std::string copy(static_cast<const char*>(image), size);
  ASSERT_CU(CUDA_SUCCESS, cuLinkDestroy(link_));
  link_ = nullptr;
  CUlibrary lib = nullptr;
  ASSERT_CU(CUDA_SUCCESS,
            cuLibraryLoadData(&lib, copy.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k = nullptr;
  EXPECT_CU(CUDA_SUCCESS, cuLibraryGetKernel(&k, lib, "caller"));
  EXPECT_CU(CUDA_SUCCESS, cuLibraryGetGlobal(&counter, &bytes, lib, "counter"));
  EXPECT_CU(CUDA_SUCCESS, cuLibraryUnload(lib));
}

TEST_F(Link, CubinAndFatbinInputsKeepTheirKernelsAndResources) {
  const std::string cubin = fakegpu_test::cubin({.kernels = {{"from_cubin", 40, 0, 0, 512}}});
  const std::string fatbin = fakegpu_test::fatbin(
      fakegpu_test::cubin({.kernels = {{"from_fatbin", 96}}, .objects = {{"table", 256}}}), false);
  ASSERT_CU(CUDA_SUCCESS, add(CU_JIT_INPUT_CUBIN, cubin, "a.cubin"));
  ASSERT_CU(CUDA_SUCCESS, add(CU_JIT_INPUT_FATBINARY, fatbin, "b.fatbin"));
  ASSERT_CU(CUDA_SUCCESS, add_ptx(kHelperPtx, "helper.ptx"));
  void* image = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuLinkComplete(link_, &image, nullptr));
  CUmodule m = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&m, image));
  CUfunction a = nullptr, b = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetFunction(&a, m, "from_cubin"));
  ASSERT_CU(CUDA_SUCCESS, cuModuleGetFunction(&b, m, "from_fatbin"));
  int regs = 0, shared = 0;
  EXPECT_CU(CUDA_SUCCESS, cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, a));
  EXPECT_CU(CUDA_SUCCESS, cuFuncGetAttribute(&shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, a));
  EXPECT_EQ(regs, 40);
  EXPECT_EQ(shared, 512);
  EXPECT_CU(CUDA_SUCCESS, cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, b));
  EXPECT_EQ(regs, 96);
  size_t bytes = 0;
  EXPECT_CU(CUDA_SUCCESS, cuModuleGetGlobal(nullptr, &bytes, m, "table"));
  EXPECT_EQ(bytes, 256u);
  EXPECT_CU(CUDA_SUCCESS, cuModuleGetGlobal(nullptr, &bytes, m, "counter"));
  EXPECT_CU(CUDA_SUCCESS, cuModuleUnload(m));
}

TEST_F(Link, AnUnresolvedExternFailsTheLinkAndSaysWhy) {
  ASSERT_CU(CUDA_SUCCESS, add_ptx(kMissingPtx, "lonely.ptx"));
  void* image = nullptr;
  EXPECT_CU(CUDA_ERROR_INVALID_PTX, cuLinkComplete(link_, &image, nullptr));
  EXPECT_NE(std::strstr(error_, "Undefined reference to 'missing' in 'lonely.ptx'"), nullptr)
      << error_;
  EXPECT_EQ(error_written(), std::strlen(error_) + 1);
  EXPECT_STREQ(info_, "");
}

TEST_F(Link, ADefinitionInTwoInputsFailsTheLink) {
  ASSERT_CU(CUDA_SUCCESS, add_ptx(kHelperPtx, "one.ptx"));
  ASSERT_CU(CUDA_SUCCESS, add_ptx(kHelperPtx, "two.ptx"));
  void* image = nullptr;
  EXPECT_CU(CUDA_ERROR_INVALID_PTX, cuLinkComplete(link_, &image, nullptr));
  EXPECT_NE(std::strstr(error_, "Multiple definition of 'helper' in 'two.ptx'"), nullptr) << error_;
}

TEST_F(Link, BadInputsGetTheDocumentedErrorsAndTheLogSaysWhy) {
  EXPECT_CU(CUDA_ERROR_INVALID_PTX, add_ptx("not ptx at all", "bad.ptx"));
  EXPECT_NE(std::strstr(error_, "bad.ptx"), nullptr) << error_;
  EXPECT_CU(CUDA_ERROR_INVALID_IMAGE, add(CU_JIT_INPUT_CUBIN, "garbage!", "bad.cubin"));
  EXPECT_CU(CUDA_ERROR_INVALID_IMAGE, add(CU_JIT_INPUT_FATBINARY, "garbage!", "bad.fatbin"));
  EXPECT_CU(
      CUDA_ERROR_INVALID_IMAGE,
      add(CU_JIT_INPUT_FATBINARY,
          fakegpu_test::fatbin(fakegpu_test::cubin({}), /*compressed=*/true), "packed.fatbin"));
  EXPECT_CU(CUDA_ERROR_INVALID_IMAGE, add(CU_JIT_INPUT_NVVM, "BC\xc0\xde", "lto.ir"));
  EXPECT_CU(CUDA_ERROR_INVALID_IMAGE, add(CU_JIT_INPUT_LIBRARY, "not an archive", "libx.a"));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, add(static_cast<CUjitInputType>(99), kHelperPtx, "x"));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuLinkAddData(link_, CU_JIT_INPUT_PTX, nullptr, 10, "x", 0, nullptr, nullptr));
  CUjit_option whole_link = CU_JIT_WALL_TIME;
  void* value = nullptr;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuLinkAddData(link_, CU_JIT_INPUT_PTX, const_cast<char*>(kHelperPtx),
                          std::strlen(kHelperPtx) + 1, "x", 1, &whole_link, &value));
  EXPECT_CU(CUDA_ERROR_FILE_NOT_FOUND,
            cuLinkAddFile(link_, CU_JIT_INPUT_PTX, "/nonexistent/x.ptx", 0, nullptr, nullptr));
  // The log stays terminated within its size however much accumulates.
  EXPECT_LT(std::strlen(error_), sizeof error_);
  EXPECT_EQ(error_written(), std::strlen(error_) + 1);
}

TEST_F(Link, HandlesAreValidated) {
  int not_a_link = 0;
  auto* garbage = reinterpret_cast<CUlinkState>(&not_a_link);
  void* image = nullptr;
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE,
            cuLinkAddData(garbage, CU_JIT_INPUT_PTX, const_cast<char*>(kHelperPtx), 10, "x", 0,
                          nullptr, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuLinkComplete(garbage, &image, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuLinkDestroy(garbage));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuLinkDestroy(reinterpret_cast<CUlinkState>(ctx_)));
  CUlinkState other = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cuLinkCreate(0, nullptr, nullptr, &other));
  ASSERT_CU(CUDA_SUCCESS, cuLinkDestroy(other));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuLinkComplete(other, &image, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuLinkDestroy(other));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuLinkCreate(0, nullptr, nullptr, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuLinkComplete(link_, nullptr, nullptr));
  // A link compiles for the current context's device: none current, none made.
  ASSERT_CU(CUDA_SUCCESS, cuCtxSetCurrent(nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuLinkCreate(0, nullptr, nullptr, &other));
}

}  // namespace
