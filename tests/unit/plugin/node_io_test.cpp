// The plugin's node-side pieces that touch files: NUMA lookup in sysfs, the
// allocation store (regions written idempotently), the facts the cleaner
// gathers, and the ListAndWatch snapshot. Each test works in its own temp dir.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include <gtest/gtest.h>

#include "plugin/core/device_id.hpp"
#include "plugin/node/allocation_cleaner.hpp"
#include "plugin/node/allocation_store.hpp"
#include "plugin/node/nvml_library.hpp"
#include "plugin/node/plugin_service.hpp"
#include "shm/limits_seqlock.hpp"
#include "shm/region_file.hpp"
#include "tests/unit/plugin/test_inventory.hpp"

namespace cushare::plugin {
namespace {

namespace fs = std::filesystem;
using namespace testing;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "cushare-plugin-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST(numa_node_from_sysfs, ReadsTheNodeOfTheBus) {
  TempDir sys;
  write_file(sys.path() / "bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
  write_file(sys.path() / "bus/pci/devices/0000:5e:00.0/numa_node", "-1\n");
  EXPECT_EQ(numa_node_from_sysfs(sys.path().string(), "00000000:3B:00.0"), 1);
  EXPECT_EQ(numa_node_from_sysfs(sys.path().string(), "0000:3b:00.0"), 1);
  EXPECT_EQ(numa_node_from_sysfs(sys.path().string(), "00000000:5E:00.0"), kUnknownNumaNode);
  EXPECT_EQ(numa_node_from_sysfs(sys.path().string(), "00000000:99:00.0"), kUnknownNumaNode);
}

TEST(Snapshot, AllIdsOfAnUnhealthyGpuAtOnceWithTopology) {
  auto inv = two_gpus();
  inv.gpus[1].numa_node = kUnknownNumaNode;
  const auto snap = build_snapshot(inv, {kUuidB}, 4);
  ASSERT_EQ(snap.devices_size(), 8);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(snap.devices(i).id(), format_device_id(kUuidA, static_cast<unsigned>(i)));
    EXPECT_EQ(snap.devices(i).health(), "Healthy");
    ASSERT_EQ(snap.devices(i).topology().nodes_size(), 1);
    EXPECT_EQ(snap.devices(i).topology().nodes(0).id(), 0);
  }
  for (int i = 4; i < 8; ++i) {
    EXPECT_EQ(snap.devices(i).health(), "Unhealthy");
    EXPECT_FALSE(snap.devices(i).has_topology());
  }
}

std::vector<std::string> unit_ids(const std::string& uuid, unsigned n) {
  std::vector<std::string> ids;
  for (unsigned i = 0; i < n; ++i) ids.push_back(format_device_id(uuid, i));
  return ids;
}

// A run dir of its own, the default config pointing at it, and a store.
class StoreTest : public ::testing::Test {
 protected:
  StoreTest() { config.run_dir = run.path().string(); }
  TempDir run;
  PluginConfig config;
  AllocationStore store{run.path().string()};
};

TEST_F(StoreTest, WritesLimitsUsageAndPreload) {
  const auto plan = plan_allocation(two_gpus(), unit_ids(kUuidA, 25), config);
  store.write(plan);
  auto limits =
      shm::LimitsMapping::open(fs::path(plan.host_alloc_dir) / "limits", shm::Access::kReadOnly);
  EXPECT_EQ(std::string(limits.region().header.alloc_id), plan.alloc_id);
  EXPECT_EQ(limits.region().header.flags & shm::kCreatedByPlugin, shm::kCreatedByPlugin);
  ASSERT_EQ(limits.region().gpu_count.load(), 1u);
  EXPECT_EQ(std::string(limits.region().gpus[0].uuid), kUuidA);
  const auto q = shm::read_gpu_limits(limits.region(), 0);
  EXPECT_EQ(q.memory_limit_bytes, 20 * kGi);
  EXPECT_EQ(q.compute_limit_pct, 25u);
  auto usage =
      shm::UsageMapping::open(fs::path(plan.host_alloc_dir) / "usage", shm::Access::kReadOnly);
  EXPECT_EQ(usage.region().gpu_count.load(), 1u);
  std::ifstream preload(plan.preload_host_path);
  std::string line;
  std::getline(preload, line);
  EXPECT_EQ(line, config.library_container_path);
}

TEST_F(StoreTest, RepeatedWriteKeepsTheFileAndUpdatesQuotas) {
  const auto plan = plan_allocation(two_gpus(), unit_ids(kUuidA, 25), config);
  store.write(plan);
  const auto limits_path = fs::path(plan.host_alloc_dir) / "limits";
  struct stat before {};
  ASSERT_EQ(stat(limits_path.c_str(), &before), 0);
  // Same IDs, new node ratio (plugin restarted with another config).
  config.memory_ratio = 0.5;
  const auto plan2 = plan_allocation(two_gpus(), unit_ids(kUuidA, 25), config);
  ASSERT_EQ(plan2.alloc_id, plan.alloc_id);
  store.write(plan2);
  struct stat after {};
  ASSERT_EQ(stat(limits_path.c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  auto limits = shm::LimitsMapping::open(limits_path, shm::Access::kReadOnly);
  EXPECT_EQ(shm::read_gpu_limits(limits.region(), 0).memory_limit_bytes, 10 * kGi);
}

TEST_F(StoreTest, CorruptRegionsAreRecreated) {
  const auto plan = plan_allocation(two_gpus(), unit_ids(kUuidB, 10), config);
  write_file(fs::path(plan.host_alloc_dir) / "limits", "not a region");
  write_file(fs::path(plan.host_alloc_dir) / "usage", "not a region either");
  store.write(plan);
  EXPECT_NO_THROW(
      shm::LimitsMapping::open(fs::path(plan.host_alloc_dir) / "limits", shm::Access::kReadOnly));
  EXPECT_NO_THROW(
      shm::UsageMapping::open(fs::path(plan.host_alloc_dir) / "usage", shm::Access::kReadOnly));
}

// A retried Allocate finds what the last container left in its folder: a
// symbolic link or a FIFO where usage was is replaced, never written through
// (the plugin runs as root), and the folder gets the node's modes.
TEST_F(StoreTest, ARepeatedWriteNeverFollowsWhatTheTenantLeft) {
  const auto plan = plan_allocation(two_gpus(), unit_ids(kUuidA, 25), config);
  store.write(plan);
  const fs::path usage = fs::path(plan.host_alloc_dir) / "usage";
  const fs::path victim = run.path() / "victim";
  write_file(victim, "precious");
  fs::remove(usage);
  fs::create_symlink(victim, usage);
  store.write(plan);
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(usage)));
  EXPECT_NO_THROW(shm::UsageMapping::open(usage, shm::Access::kReadOnly));
  std::ifstream in(victim);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "precious");
  fs::remove(usage);
  ASSERT_EQ(::mkfifo(usage.c_str(), 0666), 0);
  store.write(plan);  // would block on a FIFO opened for writing
  EXPECT_NO_THROW(shm::UsageMapping::open(usage, shm::Access::kReadOnly));
  struct stat sb {};
  ASSERT_EQ(::stat(plan.host_alloc_dir.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 07777, 0711u);
  ASSERT_EQ(::stat(fs::path(plan.host_alloc_dir).parent_path().c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 07777, 0700u);
}

TEST_F(StoreTest, RemovalSparesRecentWrites) {
  const auto plan = plan_allocation(two_gpus(), unit_ids(kUuidA, 5), config);
  store.write(plan);
  EXPECT_FALSE(store.remove_unless_recent(plan.alloc_id, std::chrono::seconds(600)));
  EXPECT_TRUE(fs::exists(plan.host_alloc_dir));
  EXPECT_TRUE(store.remove_unless_recent(plan.alloc_id, std::chrono::seconds(0)));
  EXPECT_FALSE(fs::exists(plan.host_alloc_dir));
}

TEST_F(StoreTest, FolderFactsSeeLiveSlotsAndCreationTime) {
  const auto idle = plan_allocation(two_gpus(), unit_ids(kUuidA, 5), config);
  const auto busy = plan_allocation(two_gpus(), unit_ids(kUuidB, 5), config);
  store.write(idle);
  store.write(busy);
  {
    auto usage =
        shm::UsageMapping::open(fs::path(busy.host_alloc_dir) / "usage", shm::Access::kReadWrite);
    usage.mutable_region().slots[3].state.store(
        static_cast<std::uint32_t>(shm::SlotState::kActive));
  }
  auto facts = gather_folder_facts(config.run_dir);
  ASSERT_EQ(facts.size(), 2u);
  if (facts[0].alloc_id != idle.alloc_id) std::swap(facts[0], facts[1]);
  EXPECT_EQ(facts[0].alloc_id, idle.alloc_id);
  EXPECT_EQ(facts[1].alloc_id, busy.alloc_id);
  EXPECT_FALSE(facts[0].has_live_process);
  EXPECT_TRUE(facts[1].has_live_process);
  const auto age = std::chrono::system_clock::now() - facts[0].created;
  EXPECT_LT(age, std::chrono::minutes(1));
  EXPECT_GT(age, std::chrono::seconds(-5));
}

}  // namespace
}  // namespace cushare::plugin
