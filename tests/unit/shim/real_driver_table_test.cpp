// The need column of the real-driver tables: what initialisation refuses.
#include <gtest/gtest.h>

#include <string>

#include "shim/driver/real_driver.hpp"

namespace cushare::shim {
namespace {

void some_function() {}

// Every entry set to a dummy function: a driver that has everything.
template <class Table>
Table complete();

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
template <>
RealDriver complete<RealDriver>() {
  RealDriver t;
#define CUSHARE_FILL(sym, type, need) t.sym = reinterpret_cast<type>(&some_function);
  CUSHARE_HOOKED_DRIVER_FUNCTIONS(CUSHARE_FILL)
  CUSHARE_REAL_ONLY_DRIVER_FUNCTIONS(CUSHARE_FILL)
#undef CUSHARE_FILL
  return t;
}
#pragma GCC diagnostic pop

template <>
RealNvml complete<RealNvml>() {
  RealNvml t;
#define CUSHARE_FILL(sym, type, need) t.sym = reinterpret_cast<type>(&some_function);
  CUSHARE_HOOKED_NVML_FUNCTIONS(CUSHARE_FILL)
  CUSHARE_REAL_ONLY_NVML_FUNCTIONS(CUSHARE_FILL)
#undef CUSHARE_FILL
  return t;
}

TEST(RealDriverTable, CompleteDriverLacksNothing) {
  EXPECT_EQ(missing_required(complete<RealDriver>()), nullptr);
  EXPECT_EQ(missing_required(complete<RealNvml>()), nullptr);
}

TEST(RealDriverTable, OptionalFunctionsMayBeMissing) {
  RealDriver d = complete<RealDriver>();
  d.cuGraphInstantiateWithParams = nullptr;  // 12.0
  d.cuCtxCreate_v4 = nullptr;                // 12.5
  d.cuMemAlloc = nullptr;                    // the pre-3.2 ABI
  d.cuEventElapsedTime_v2 = nullptr;         // 12.8, only called by the shim
  EXPECT_EQ(missing_required(d), nullptr);
  RealNvml n = complete<RealNvml>();
  n.nvmlDeviceGetComputeRunningProcesses_v3 = nullptr;  // R510
  EXPECT_EQ(missing_required(n), nullptr);
}

TEST(RealDriverTable, MissingRequiredFunctionIsNamed) {
  RealDriver d = complete<RealDriver>();
  d.cuDeviceGetUuid_v2 = nullptr;
  ASSERT_NE(missing_required(d), nullptr);
  EXPECT_EQ(std::string(missing_required(d)), "cuDeviceGetUuid_v2");
  d = complete<RealDriver>();
  d.cuMemAlloc_v2 = nullptr;  // hooked and required
  EXPECT_EQ(std::string(missing_required(d)), "cuMemAlloc_v2");
  RealNvml n = complete<RealNvml>();
  n.nvmlDeviceGetUUID = nullptr;
  EXPECT_EQ(std::string(missing_required(n)), "nvmlDeviceGetUUID");
}

}  // namespace
}  // namespace cushare::shim
