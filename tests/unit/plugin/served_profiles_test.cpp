// Profiles: which resource each GPU serves, and the configuration each
// resource is served with.
#include "plugin/core/served_profiles.hpp"

#include <gtest/gtest.h>

#include "plugin/core/allocation_plan.hpp"
#include "tests/unit/plugin/test_inventory.hpp"

namespace cushare::plugin {
namespace {

using testing::four_gpus_two_numa;
using testing::kGi;
using testing::kUuidA;
using testing::kUuidB;
using testing::kUuidC;
using testing::kUuidD;

constexpr const char* kTwoProfiles = R"({
  "unitsPerGpu": 10, "computeMode": "capped", "socketName": "cushare.sock",
  "profiles": [
    {"resourceName": "cushare.io/vgpu", "gpus": [0, "1"]},
    {"resourceName": "cushare.io/vgpu-mem", "gpus": ["GPU-cccccccc-0000-0000-0000-000000000003"],
     "unitsPerGpu": 8, "computeRatio": 0.5, "computeMode": "burst"}]})";

TEST(ServedProfiles, WithoutProfilesOneResourceServesEveryGpu) {
  const PluginConfig c;
  const auto plan = plan_profiles(c, four_gpus_two_numa());
  ASSERT_EQ(plan.profiles.size(), 1u);
  EXPECT_EQ(plan.profiles[0].config.resource_name, "cushare.io/vgpu");
  EXPECT_EQ(plan.profiles[0].inventory.gpus.size(), 4u);
  EXPECT_TRUE(plan.unassigned_gpus.empty());
}

TEST(ServedProfiles, EachProfileServesItsGpusWithItsOwnUnitsAndRatios) {
  const PluginConfig c = parse_config_json(kTwoProfiles);
  validate_config(c);
  const auto plan = plan_profiles(c, four_gpus_two_numa());
  ASSERT_EQ(plan.profiles.size(), 2u);
  const auto& whole = plan.profiles[0];
  EXPECT_EQ(whole.config.resource_name, "cushare.io/vgpu");
  EXPECT_EQ(whole.config.units_per_gpu, 10u);  // the top-level value
  EXPECT_EQ(whole.config.compute_mode, shm::ComputeMode::kCapped);
  EXPECT_EQ(whole.config.socket_name, "cushare.sock");
  ASSERT_EQ(whole.inventory.gpus.size(), 2u);
  EXPECT_EQ(whole.inventory.gpus[0].uuid, kUuidA);
  EXPECT_EQ(whole.inventory.gpus[1].uuid, kUuidB);
  const auto& mem = plan.profiles[1];
  EXPECT_EQ(mem.config.resource_name, "cushare.io/vgpu-mem");
  EXPECT_EQ(mem.config.units_per_gpu, 8u);
  EXPECT_DOUBLE_EQ(mem.config.compute_ratio, 0.5);
  EXPECT_EQ(mem.config.compute_mode, shm::ComputeMode::kBurst);
  EXPECT_EQ(mem.config.socket_name, "cushare-1.sock");
  ASSERT_EQ(mem.inventory.gpus.size(), 1u);
  EXPECT_EQ(mem.inventory.gpus[0].uuid, kUuidC);
  EXPECT_EQ(plan.unassigned_gpus, std::vector<std::string>{kUuidD});
}

TEST(ServedProfiles, AnAllocationIsPlannedWithItsProfilesRatios) {
  const PluginConfig c = parse_config_json(kTwoProfiles);
  const auto plan = plan_profiles(c, four_gpus_two_numa());
  const auto& mem = plan.profiles[1];
  const std::vector<std::string> ids = {kUuidC + "::0", kUuidC + "::1"};
  const auto a = plan_allocation(mem.inventory, ids, mem.config);
  ASSERT_EQ(a.gpus.size(), 1u);
  EXPECT_EQ(a.gpus[0].memory_limit_bytes, 80 * kGi * 2 / 8);  // 2 of 8 units
  EXPECT_EQ(a.gpus[0].compute_limit_pct, 12u);                // 2/8 x 100 x 0.5, rounded down
  // A GPU of the other profile is unknown to this resource.
  EXPECT_THROW(plan_allocation(mem.inventory, std::vector<std::string>{kUuidA + "::0"}, mem.config),
               AllocationError);
}

TEST(ServedProfiles, ConfigurationsThatCouldOvercommitAreRefused) {
  auto error_of = [](const std::string& json) -> std::string {
    try {
      const PluginConfig c = parse_config_json(json);
      validate_config(c);
      plan_profiles(c, four_gpus_two_numa());
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  // One GPU in two profiles, by the same name or by index and UUID.
  EXPECT_NE(error_of(R"({"profiles": [{"resourceName": "a.io/x", "gpus": [0]},
                                      {"resourceName": "a.io/y", "gpus": [0]}]})")
                .find("two profiles"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"profiles": [{"resourceName": "a.io/x", "gpus": [0]},
                                      {"resourceName": "a.io/y",
                                       "gpus": ["GPU-aaaaaaaa-0000-0000-0000-000000000001"]}]})")
                .find("two profiles"),
            std::string::npos);
  // One resource served twice.
  EXPECT_NE(error_of(R"({"profiles": [{"resourceName": "a.io/x", "gpus": [0]},
                                      {"resourceName": "a.io/x", "gpus": [1]}]})")
                .find("two profiles"),
            std::string::npos);
  // A GPU the node does not have.
  EXPECT_NE(error_of(R"({"profiles": [{"resourceName": "a.io/x", "gpus": [7]}]})").find("'7'"),
            std::string::npos);
  // Ratios above the card.
  EXPECT_NE(error_of(R"({"profiles": [{"resourceName": "a.io/x", "gpus": [0],
                                       "memoryRatio": 1.5}]})")
                .find("profiles[0]: memoryRatio"),
            std::string::npos);
  // Shape errors name the key.
  EXPECT_NE(error_of(R"({"profiles": [{"resourceName": "a.io/x", "gpus": [0], "units": 3}]})")
                .find("profiles[0].units"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"profiles": [{"resourceName": "a.io/x"}]})").find("gpus"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"profiles": [{"gpus": [0]}]})").find("resourceName"), std::string::npos);
  EXPECT_NE(error_of(R"({"profiles": {"resourceName": "a.io/x"}})").find("list"),
            std::string::npos);
}

TEST(ServedProfiles, ResourceNamesListEveryProfile) {
  EXPECT_EQ(resource_names(PluginConfig{}), std::vector<std::string>{"cushare.io/vgpu"});
  EXPECT_EQ(resource_names(parse_config_json(kTwoProfiles)),
            (std::vector<std::string>{"cushare.io/vgpu", "cushare.io/vgpu-mem"}));
}

}  // namespace
}  // namespace cushare::plugin
