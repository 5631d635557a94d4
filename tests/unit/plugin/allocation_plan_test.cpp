#include "plugin/core/allocation_plan.hpp"

#include <gtest/gtest.h>

#include "plugin/core/device_id.hpp"
#include "tests/unit/plugin/test_inventory.hpp"

namespace cushare::plugin {
namespace {

using namespace testing;

std::vector<std::string> unit_ids(const std::string& uuid, unsigned first, unsigned count) {
  std::vector<std::string> ids;
  for (unsigned i = 0; i < count; ++i) ids.push_back(format_device_id(uuid, first + i));
  return ids;
}

TEST(AllocationPlan, QuarterOfOneGpu) {
  PluginConfig config;
  const auto plan = plan_allocation(two_gpus(), unit_ids(kUuidA, 10, 25), config);
  ASSERT_EQ(plan.gpus.size(), 1u);
  EXPECT_EQ(plan.gpus[0].uuid, kUuidA);
  EXPECT_EQ(plan.gpus[0].units, 25u);
  EXPECT_EQ(plan.gpus[0].memory_limit_bytes, 20 * kGi);
  EXPECT_EQ(plan.gpus[0].compute_limit_pct, 25u);
  EXPECT_EQ(plan.gpus[0].weight, 25u);
  EXPECT_EQ(plan.gpus[0].mode, shm::ComputeMode::kBurst);

  EXPECT_EQ(plan.env.at("NVIDIA_VISIBLE_DEVICES"), kUuidA);
  EXPECT_EQ(plan.env.at("CUSHARE_RUN_DIR"), "/var/run/cushare");
  EXPECT_EQ(plan.env.at("CUSHARE_MEMORY_LIMIT"), std::to_string(20 * kGi));
  EXPECT_EQ(plan.env.at("CUSHARE_MEMORY_LIMIT_" + kUuidA), std::to_string(20 * kGi));
  EXPECT_EQ(plan.env.at("CUSHARE_COMPUTE_LIMIT"), "25");
  EXPECT_EQ(plan.env.at("CUSHARE_COMPUTE_WEIGHT"), "25");
  EXPECT_EQ(plan.env.at("CUSHARE_COMPUTE_MODE"), "burst");
  EXPECT_EQ(plan.annotations.at(kAllocIdAnnotation), plan.alloc_id);
  EXPECT_TRUE(plan.devices.empty());
  EXPECT_TRUE(plan.cdi_devices.empty());
}

TEST(AllocationPlan, MountsLibraryPreloadFolderAndReadOnlyLimits) {
  PluginConfig config;
  config.run_dir = "/run/cushare-node";
  config.library_host_path = "/opt/cushare/lib/libcushare.so";
  config.library_container_path = "/usr/local/cushare/libcushare.so";
  const auto plan = plan_allocation(two_gpus(), unit_ids(kUuidB, 0, 3), config);
  const std::string dir = "/run/cushare-node/alloc/" + plan.alloc_id;
  EXPECT_EQ(plan.host_alloc_dir, dir);
  const std::vector<MountEdit> expected = {
      {"/usr/local/cushare/libcushare.so", "/opt/cushare/lib/libcushare.so", true},
      {"/etc/ld.so.preload", "/run/cushare-node/ld.so.preload", true},
      {"/var/run/cushare", dir, false},
      {"/var/run/cushare/limits", dir + "/limits", true},
  };
  EXPECT_EQ(plan.mounts, expected);
  EXPECT_EQ(plan.preload_host_path, "/run/cushare-node/ld.so.preload");
  EXPECT_EQ(plan.preload_content, "/usr/local/cushare/libcushare.so\n");
}

TEST(AllocationPlan, NoPreloadWhenDisabled) {
  PluginConfig config;
  config.ld_so_preload = false;
  const auto plan = plan_allocation(two_gpus(), unit_ids(kUuidA, 0, 1), config);
  EXPECT_TRUE(plan.preload_host_path.empty());
  for (const auto& m : plan.mounts) EXPECT_NE(m.container_path, "/etc/ld.so.preload");
}

TEST(AllocationPlan, IdsSpanningGpusGivePerGpuQuotas) {
  PluginConfig config;
  config.gpu_spanning = GpuSpanning::kAny;
  auto ids = unit_ids(kUuidB, 90, 10);  // B listed first: the plan still follows host order
  const auto more = unit_ids(kUuidA, 0, 50);
  ids.insert(ids.end(), more.begin(), more.end());
  const auto plan = plan_allocation(two_gpus(), ids, config);
  ASSERT_EQ(plan.gpus.size(), 2u);
  EXPECT_EQ(plan.gpus[0].uuid, kUuidA);
  EXPECT_EQ(plan.gpus[0].memory_limit_bytes, 40 * kGi);
  EXPECT_EQ(plan.gpus[0].compute_limit_pct, 50u);
  EXPECT_EQ(plan.gpus[1].uuid, kUuidB);
  EXPECT_EQ(plan.gpus[1].memory_limit_bytes, 16 * kGi / 10);
  EXPECT_EQ(plan.gpus[1].compute_limit_pct, 10u);
  EXPECT_EQ(plan.env.at("NVIDIA_VISIBLE_DEVICES"), kUuidA + "," + kUuidB);
  EXPECT_EQ(plan.env.at("CUSHARE_MEMORY_LIMIT_" + kUuidA), std::to_string(40 * kGi));
  EXPECT_EQ(plan.env.at("CUSHARE_COMPUTE_LIMIT_" + kUuidB), "10");
  // Without one value for all GPUs there is no plain form; the limits file rules.
  EXPECT_FALSE(plan.env.contains("CUSHARE_MEMORY_LIMIT"));
  EXPECT_FALSE(plan.env.contains("CUSHARE_COMPUTE_LIMIT"));
  EXPECT_FALSE(plan.env.contains("CUSHARE_COMPUTE_WEIGHT"));
}

TEST(AllocationPlan, RatiosModeAndSmallestShare) {
  PluginConfig config;
  config.units_per_gpu = 8;
  config.memory_ratio = 0.5;
  config.compute_ratio = 0.04;
  config.compute_mode = shm::ComputeMode::kCapped;
  const auto plan = plan_allocation(two_gpus(), unit_ids(kUuidA, 0, 1), config);
  EXPECT_EQ(plan.gpus[0].memory_limit_bytes, 5 * kGi);  // 80Gi / 8 * 0.5
  EXPECT_EQ(plan.gpus[0].compute_limit_pct, 1u);        // 0.5 rounds to 0, clamped to 1
  EXPECT_EQ(plan.gpus[0].mode, shm::ComputeMode::kCapped);
  EXPECT_EQ(plan.env.at("CUSHARE_COMPUTE_MODE"), "capped");
}

TEST(AllocationPlan, ComputeLimitsOfOneGpuNeverAddUpPast100) {
  PluginConfig config;
  config.units_per_gpu = 7;
  // Rounded, 2 units of 7 were 29 % and 3 x 2 + 1 units promised 101 %.
  EXPECT_EQ(plan_allocation(two_gpus(), unit_ids(kUuidA, 0, 2), config).gpus[0].compute_limit_pct,
            28u);
  EXPECT_EQ(plan_allocation(two_gpus(), unit_ids(kUuidA, 0, 1), config).gpus[0].compute_limit_pct,
            14u);
  config.units_per_gpu = 100;
  config.compute_ratio = 0.9;
  EXPECT_EQ(plan_allocation(two_gpus(), unit_ids(kUuidA, 0, 10), config).gpus[0].compute_limit_pct,
            9u);
}

TEST(AllocationPlan, WholeGpuIsTheWholeCard) {
  PluginConfig config;
  const auto plan = plan_allocation(two_gpus(), unit_ids(kUuidB, 0, 100), config);
  EXPECT_EQ(plan.gpus[0].memory_limit_bytes, 16 * kGi);
  EXPECT_EQ(plan.gpus[0].compute_limit_pct, 100u);
}

TEST(AllocationPlan, DeviceSpecsAndCdiNamesWhenConfigured) {
  PluginConfig config;
  config.device_specs = DeviceSpecStrategy::kDevNodes;
  config.dev_root = "/host";
  config.cdi_kind = "nvidia.com/gpu";
  auto inv = two_gpus();
  inv.gpus[1].minor_number = 7;
  inv.control_nodes = {"/dev/nvidiactl", "/dev/nvidia-uvm"};
  const auto plan = plan_allocation(inv, unit_ids(kUuidB, 0, 2), config);
  const std::vector<DeviceNodeEdit> expected = {
      {"/dev/nvidia7", "/host/dev/nvidia7", "rw"},
      {"/dev/nvidiactl", "/host/dev/nvidiactl", "rw"},
      {"/dev/nvidia-uvm", "/host/dev/nvidia-uvm", "rw"},
  };
  EXPECT_EQ(plan.devices, expected);
  EXPECT_EQ(plan.cdi_devices, std::vector<std::string>{"nvidia.com/gpu=" + kUuidB});
}

TEST(AllocationPlan, AllocationIdIsStableAndOrderIndependent) {
  PluginConfig config;
  auto ids = unit_ids(kUuidA, 0, 5);
  const auto a = plan_allocation(two_gpus(), ids, config).alloc_id;
  std::reverse(ids.begin(), ids.end());
  EXPECT_EQ(plan_allocation(two_gpus(), ids, config).alloc_id, a);
  EXPECT_NE(plan_allocation(two_gpus(), unit_ids(kUuidA, 1, 5), config).alloc_id, a);
  // Pinned: the id must not change between releases (folders survive upgrades).
  EXPECT_EQ(allocation_id_for(std::vector<std::string>{"x::1", "x::0"}),
            allocation_id_for(std::vector<std::string>{"x::0", "x::1"}));
  EXPECT_EQ(a.size(), 17u);
  EXPECT_EQ(a[0], 'a');
  EXPECT_EQ(allocation_id_for(std::vector<std::string>{"a"}), "aaf63dc4c8601ec8c");
}

void expect_error(const std::vector<std::string>& ids, const std::string& fragment,
                  const PluginConfig& config = {}) {
  try {
    plan_allocation(two_gpus(), ids, config);
    ADD_FAILURE() << "no error for " << fragment;
  } catch (const AllocationError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(AllocationPlan, BadIdsAreErrorsNamingTheId) {
  expect_error({}, "no device IDs");
  expect_error({kUuidA + "::1", "garbage"}, "'garbage'");
  expect_error({"GPU-nope::1"}, "'GPU-nope::1'");
  expect_error({kUuidA + "::100"}, "'" + kUuidA + "::100'");
  expect_error({kUuidA + "::007"}, "'" + kUuidA + "::007'");
  expect_error({kUuidA + "::3", kUuidA + "::3"}, "appears twice");
}

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(AllocationPlan, UnitsOfSeveralGpusAreRefusedByDefault) {
  // 60 units that fit on one GPU but came as 50 + 10.
  expect_error(joined(unit_ids(kUuidA, 0, 50), unit_ids(kUuidB, 0, 10)),
               "request of 60 units would span 2 GPUs (" + kUuidA + " x50, " + kUuidB +
                   " x10): 60 units fit on one GPU (100 units each), but no GPU had 60 free "
                   "units; gpuSpanning is 'none'");
  expect_error(joined(unit_ids(kUuidA, 0, 100), unit_ids(kUuidB, 0, 100)),
               "200 units are more than one GPU holds (100 units each)");
}

TEST(AllocationPlan, WholeSpanningAllowsWholeGpusOnly) {
  PluginConfig config;
  config.gpu_spanning = GpuSpanning::kWhole;
  const auto plan = plan_allocation(
      two_gpus(), joined(unit_ids(kUuidA, 0, 100), unit_ids(kUuidB, 0, 100)), config);
  EXPECT_EQ(plan.gpus.size(), 2u);
  expect_error(joined(unit_ids(kUuidA, 0, 100), unit_ids(kUuidB, 0, 50)),
               "gpuSpanning is 'whole': only whole GPUs (100 units each) may be combined", config);
  expect_error(joined(unit_ids(kUuidA, 0, 30), unit_ids(kUuidB, 0, 30)), "set gpuSpanning to 'any'",
               config);
}

}  // namespace
}  // namespace cushare::plugin
