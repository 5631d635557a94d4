// The node's duty table and the neighbours a would-be borrower watches
// (shim/gate/duty_cycle_table.hpp, duty_neighbours.hpp), on a made-up node
// run dir in a temporary folder.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shim/gate/duty_cycle_table.hpp"
#include "shim/gate/duty_neighbours.hpp"
#include "shm/layout.hpp"
#include "shm/run_dir_layout.hpp"

namespace cushare::shim {
namespace {

namespace fs = std::filesystem;
constexpr std::uint64_t kNow = 5'000'000'000;

class DutyTable : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cushare-duty-XXXXXX";
    root_ = mkdtemp(tmpl);
    fs::create_directories(root_ / shm::kAllocDirName);
  }
  void TearDown() override {
    set_duty_neighbours(0, folder("a"), {});  // closes what the tests opened
    fs::remove_all(root_);
  }
  std::string folder(const std::string& id) const {
    return (root_ / shm::kAllocDirName / id).string();
  }
  // A usage region for `id` whose GPU entry `gpu` shows `busy` processes.
  void write_usage(const std::string& id, unsigned gpu, std::uint32_t busy) const {
    fs::create_directories(folder(id));
    std::vector<char> bytes(sizeof(shm::UsageRegion), 0);
    std::memcpy(bytes.data() + offsetof(shm::UsageRegion, gpus) + gpu * sizeof(shm::GpuUsage) +
                    offsetof(shm::GpuUsage, busy_processes),
                &busy, sizeof(busy));
    std::ofstream(fs::path(folder(id)) / shm::kUsageName, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  fs::path root_;
};

TEST_F(DutyTable, ClaimsOfOneGpuAreEachOthersNeighboursWithTheirGpuIndex) {
  std::vector<DutyNeighbour> seen;
  EXPECT_EQ(duty_slot_for(folder("a"), "GPU-1", 0, 30, kNow, &seen),
            duty_slot({}, {"a", "GPU-1", 30}));  // alone: the whole period
  EXPECT_TRUE(seen.empty());
  duty_slot_for(folder("c"), "GPU-2", 0, 40, kNow);  // another GPU: no neighbour
  seen.clear();
  EXPECT_EQ(duty_slot_for(folder("b"), "GPU-1", 3, 50, kNow, &seen), (DutySlot{375'000, 625'000}));
  EXPECT_EQ(seen, (std::vector<DutyNeighbour>{{"a", 0}}));
  seen.clear();
  EXPECT_EQ(duty_slot_for(folder("a"), "GPU-1", 0, 30, kNow, &seen), (DutySlot{0, 375'000}));
  EXPECT_EQ(seen, (std::vector<DutyNeighbour>{{"b", 3}}));
  seen.clear();  // b's claim gone stale: a is alone again
  duty_slot_for(folder("a"), "GPU-1", 0, 30, kNow + kDutyClaimTtlNs, &seen);
  EXPECT_TRUE(seen.empty());
}

TEST_F(DutyTable, AClaimAnOlderShimWroteNamesNoGpuEntry) {
  // Its slot as such a shim leaves it (alloc_id[64], gpu_uuid[48], limit,
  // a word it never wrote, heartbeat): the word reads as no index.
  struct {
    char alloc_id[64] = "old";
    char gpu_uuid[48] = "GPU-1";
    std::uint32_t limit_pct = 50;
    std::uint32_t unwritten = 0;
    std::uint64_t heartbeat_ns = kNow;
  } old_claim;
  static_assert(sizeof(old_claim) == 128);
  std::ofstream(root_ / kDutyTableName, std::ios::binary)
      .write(reinterpret_cast<const char*>(&old_claim), sizeof(old_claim));
  std::vector<DutyNeighbour> seen;
  duty_slot_for(folder("new"), "GPU-1", 1, 30, kNow, &seen);
  EXPECT_EQ(seen, (std::vector<DutyNeighbour>{{"old", 0xFFFF'FFFF}}));
  write_usage("old", 0, 0);  // idle at entry 0, but entry 0 is not named
  set_duty_neighbours(0, folder("new"), seen);
  EXPECT_EQ(duty_neighbours(0), gate::Neighbours::kBusy);
}

TEST_F(DutyTable, NeighboursAreIdleOnlyWhileNoneOfThemHasWorkOnTheGpu) {
  EXPECT_EQ(duty_neighbours(0), gate::Neighbours::kNone);
  write_usage("b", 2, 0);
  write_usage("c", 0, 1);
  set_duty_neighbours(0, folder("a"), {{"b", 2}});
  EXPECT_EQ(duty_neighbours(0), gate::Neighbours::kIdle);
  write_usage("b", 2, 1);  // rewritten in place: the open file sees it
  EXPECT_EQ(duty_neighbours(0), gate::Neighbours::kBusy);
  write_usage("b", 2, 0);
  set_duty_neighbours(0, folder("a"), {{"b", 2}, {"c", 0}});
  EXPECT_EQ(duty_neighbours(0), gate::Neighbours::kBusy);
  set_duty_neighbours(0, folder("a"), {{"b", 2}});
  EXPECT_EQ(duty_neighbours(0), gate::Neighbours::kIdle);
}

TEST_F(DutyTable, ANeighbourThatCannotBeReadIsNeverLentFrom) {
  write_usage("b", 0, 0);
  set_duty_neighbours(0, folder("a"), {{"b", 0}});
  ASSERT_EQ(duty_neighbours(0), gate::Neighbours::kIdle);
  fs::resize_file(fs::path(folder("b")) / shm::kUsageName, 64);  // truncated under the reader
  EXPECT_EQ(duty_neighbours(0), gate::Neighbours::kBusy);

  // Missing, a FIFO (never blocks), a link, a name that leaves RUN/alloc, a
  // GPU index past the layout: all unreadable.
  fs::create_directories(folder("fifo"));
  ASSERT_EQ(mkfifo((fs::path(folder("fifo")) / shm::kUsageName).c_str(), 0600), 0);
  write_usage("real", 0, 0);
  fs::create_directories(folder("link"));
  fs::create_symlink(fs::path(folder("real")) / shm::kUsageName,
                     fs::path(folder("link")) / shm::kUsageName);
  for (const DutyNeighbour& n : std::vector<DutyNeighbour>{{"gone", 0},
                                                           {"fifo", 0},
                                                           {"link", 0},
                                                           {"..", 0},
                                                           {"x/../real", 0},
                                                           {"real", shm::kMaxGpus}}) {
    set_duty_neighbours(0, folder("a"), {n});
    EXPECT_EQ(duty_neighbours(0), gate::Neighbours::kBusy) << n.alloc_id;
  }
  set_duty_neighbours(0, folder("a"), {{"real", 0}});
  EXPECT_EQ(duty_neighbours(0), gate::Neighbours::kIdle);
}

}  // namespace
}  // namespace cushare::shim
