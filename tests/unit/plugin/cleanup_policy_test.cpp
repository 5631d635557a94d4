#include "plugin/core/cleanup_policy.hpp"

#include <gtest/gtest.h>

#include "plugin/core/allocation_plan.hpp"

namespace cushare::plugin {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using Clock = std::chrono::system_clock;

const Clock::time_point kNow = Clock::time_point{} + hours(24 * 365 * 50);

AllocationFolderFacts folder_facts(const std::string& id, Clock::duration idle, bool live = false) {
  return {id, kNow - idle, kNow - idle, live};
}

TEST(CleanupPolicy, PodResourcesDecidesForOldFolders) {
  PluginConfig config;  // min age 10 min
  const std::vector<AllocationFolderFacts> folders = {
      folder_facts("a1", hours(1)),        // gone pod -> removed
      folder_facts("a2", hours(1)),        // still listed -> kept
      folder_facts("a3", minutes(2)),      // too young -> kept
      folder_facts("a4", hours(1), true),  // a live process -> kept
  };
  LiveAllocations live{LivenessSource::kPodResources, {"a2"}};
  EXPECT_EQ(folders_to_remove(folders, live, kNow, config), std::vector<std::string>{"a1"});
  live.source = LivenessSource::kCheckpoint;
  EXPECT_EQ(folders_to_remove(folders, live, kNow, config), std::vector<std::string>{"a1"});
}

TEST(CleanupPolicy, AgeRuleWithoutAnyLivenessSource) {
  PluginConfig config;  // orphan age 7 days
  const std::vector<AllocationFolderFacts> folders = {
      folder_facts("old", hours(24 * 8)),
      folder_facts("recent", hours(24 * 6)),
      folder_facts("old-but-running", hours(24 * 30), true),
  };
  const LiveAllocations none{LivenessSource::kNone, {}};
  EXPECT_EQ(folders_to_remove(folders, none, kNow, config), std::vector<std::string>{"old"});
}

TEST(CleanupPolicy, RecentActivityCountsAsYoung) {
  PluginConfig config;
  AllocationFolderFacts f{"a1", kNow - hours(48), kNow - minutes(1), false};
  const LiveAllocations live{LivenessSource::kPodResources, {}};
  EXPECT_TRUE(folders_to_remove({f}, live, kNow, config).empty());
}

TEST(CleanupPolicy, CheckpointGivesAllocationIdsOfOurResource) {
  const std::vector<std::string> ids1 = {"GPU-a::1", "GPU-a::0"};
  const std::vector<std::string> ids2 = {"GPU-b::3"};
  const std::string checkpoint = R"({"Data":{"PodDeviceEntries":[
      {"PodUID":"p1","ContainerName":"c","ResourceName":"cushare.io/vgpu",
       "DeviceIDs":{"0":["GPU-a::0"],"1":["GPU-a::1"]},"AllocResp":"AAA="},
      {"PodUID":"p2","ContainerName":"c","ResourceName":"cushare.io/vgpu",
       "DeviceIDs":["GPU-b::3"],"AllocResp":""},
      {"PodUID":"p3","ContainerName":"c","ResourceName":"nvidia.com/gpu",
       "DeviceIDs":{"0":["GPU-z"]},"AllocResp":""}],
      "RegisteredDevices":{}},"Checksum":123})";
  const auto live = live_allocations_from_checkpoint(checkpoint, {"cushare.io/vgpu"});
  ASSERT_TRUE(live.has_value());
  EXPECT_EQ(*live, (std::set<std::string>{allocation_id_for(ids1), allocation_id_for(ids2)}));
}

TEST(CleanupPolicy, TheEntriesOfEveryProfileAreLive) {
  const std::vector<std::string> a = {"GPU-a::0"}, b = {"GPU-b::0"};
  const std::string checkpoint = R"({"Data":{"PodDeviceEntries":[
      {"PodUID":"p1","ContainerName":"c","ResourceName":"cushare.io/vgpu","DeviceIDs":["GPU-a::0"]},
      {"PodUID":"p2","ContainerName":"c","ResourceName":"cushare.io/vgpu-mem",
       "DeviceIDs":["GPU-b::0"]},
      {"PodUID":"p3","ContainerName":"c","ResourceName":"nvidia.com/gpu","DeviceIDs":["GPU-z"]}]}})";
  const auto live =
      live_allocations_from_checkpoint(checkpoint, {"cushare.io/vgpu", "cushare.io/vgpu-mem"});
  ASSERT_TRUE(live.has_value());
  EXPECT_EQ(*live, (std::set<std::string>{allocation_id_for(a), allocation_id_for(b)}));
}

TEST(CleanupPolicy, UnknownCheckpointShapeIsNotTrusted) {
  EXPECT_FALSE(live_allocations_from_checkpoint("not json", {"r"}).has_value());
  EXPECT_FALSE(live_allocations_from_checkpoint(R"({"Data":{"PodDeviceEntries":{}}})", {"r"}));
  EXPECT_FALSE(live_allocations_from_checkpoint(
      R"({"Data":{"PodDeviceEntries":[{"ResourceName":"r","DeviceIDs":7}]}})", {"r"}));
  const auto empty =
      live_allocations_from_checkpoint(R"({"Data":{"PodDeviceEntries":null}})", {"r"});
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->empty());
}

}  // namespace
}  // namespace cushare::plugin
