// The generated cuGetProcAddress table: exact ABI per (name, version, flags).
#include "shim/interpose/proc_table.hpp"

#include <cuda.h>
#include <gtest/gtest.h>

#include <string>

namespace cushare::shim {
namespace {

constexpr std::uint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

std::string resolve(const char* base, int version, std::uint64_t flags = 0) {
  const char* s = resolve_proc_symbol(base, version, flags);
  return s ? s : "<null>";
}

TEST(ProcTable, PicksNewestAbiAtOrBelowTheRequestedVersion) {
  EXPECT_EQ(resolve("cuMemAlloc", 2000), "cuMemAlloc");
  EXPECT_EQ(resolve("cuMemAlloc", 3010), "cuMemAlloc");
  EXPECT_EQ(resolve("cuMemAlloc", 3020), "cuMemAlloc_v2");
  EXPECT_EQ(resolve("cuMemAlloc", 13000), "cuMemAlloc_v2");
  EXPECT_EQ(resolve("cuCtxCreate", 11030), "cuCtxCreate_v2");
  EXPECT_EQ(resolve("cuCtxCreate", 11040), "cuCtxCreate_v3");
  EXPECT_EQ(resolve("cuCtxCreate", 12050), "cuCtxCreate_v4");
  EXPECT_EQ(resolve("cuGetProcAddress", 11030), "cuGetProcAddress");
  EXPECT_EQ(resolve("cuGetProcAddress", 12000), "cuGetProcAddress_v2");
}

// CUDA 12 gave the name cuGraphInstantiate to the 3-argument WithFlags entry
// point: a CUDA 12 caller must not get a wrapper of the 5-argument ABI.
TEST(ProcTable, TheRenamedGraphInstantiateFollowsItsNewMeaning) {
  EXPECT_EQ(resolve("cuGraphInstantiate", 10000), "cuGraphInstantiate");
  EXPECT_EQ(resolve("cuGraphInstantiate", 11080), "cuGraphInstantiate_v2");
  EXPECT_EQ(resolve("cuGraphInstantiate", 12000), "cuGraphInstantiateWithFlags");
  EXPECT_EQ(resolve("cuGraphInstantiate", 13000), "cuGraphInstantiateWithFlags");
}

TEST(ProcTable, NeverHandsANewAbiToAnOldCaller) {
  // CUDA 13 added cuCtxGetDevice_v2 / cuCtxSynchronize_v2 with a new argument.
  EXPECT_EQ(resolve("cuCtxGetDevice", 12080), "cuCtxGetDevice");
  EXPECT_EQ(resolve("cuCtxGetDevice", 13000), "cuCtxGetDevice_v2");
  EXPECT_EQ(resolve("cuCtxSynchronize", 12090), "cuCtxSynchronize");
}

TEST(ProcTable, PerThreadFlagSelectsPtszOrPtdsWhenOneExists) {
  EXPECT_EQ(resolve("cuLaunchKernel", 12000, 0), "cuLaunchKernel");
  EXPECT_EQ(resolve("cuLaunchKernel", 12000, kPerThread), "cuLaunchKernel_ptsz");
  // The _ptsz ABI appeared in 7000: an older request gets the legacy one.
  EXPECT_EQ(resolve("cuLaunchKernel", 6050, kPerThread), "cuLaunchKernel");
  EXPECT_EQ(resolve("cuMemcpyHtoD", 12000, kPerThread), "cuMemcpyHtoD_v2_ptds");
  EXPECT_EQ(resolve("cuMemAllocAsync", 11020, kPerThread), "cuMemAllocAsync_ptsz");
  EXPECT_EQ(resolve("cuStreamBeginCapture", 10000, kPerThread), "cuStreamBeginCapture_ptsz");
  EXPECT_EQ(resolve("cuStreamBeginCapture", 10010, kPerThread), "cuStreamBeginCapture_v2_ptsz");
  // No per-thread form: the default one.
  EXPECT_EQ(resolve("cuMemAlloc", 12000, kPerThread), "cuMemAlloc_v2");
  // The legacy-stream flag is the default ABI.
  EXPECT_EQ(resolve("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), "cuLaunchKernel");
}

TEST(ProcTable, UnknownOrTooOldIsNull) {
  EXPECT_EQ(resolve("cuNoSuchFunction", 13000), "<null>");
  EXPECT_EQ(resolve("cuMemAllocAsync", 11010), "<null>");
  EXPECT_EQ(resolve("", 13000), "<null>");
}

TEST(ProcTable, IsSortedAndCoversTheHeader) {
  const auto t = proc_table();
  ASSERT_GT(t.size(), 500u);  // CUDA 13.0: 637 PFN types
  for (std::size_t i = 1; i < t.size(); ++i)
    EXPECT_LE(std::string_view(t[i - 1].base), std::string_view(t[i].base)) << i;
}

}  // namespace
}  // namespace cushare::shim
