// cusharectl without a daemon returns the charges of an allocation's
// processes that are gone, and only theirs: live processes, and processes of
// another PID namespace (which it cannot judge), keep their charges.
#include "node/gone_processes.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "region_fixture.hpp"
#include "shm/proc_identity.hpp"
#include "shm/region_file.hpp"

namespace cushare::tools {
namespace {

constexpr std::uint64_t kMi = 1ull << 20;

pid_t exited_child() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

TEST(GoneProcesses, ReturnsTheChargesOfGoneProcessesOfItsOwnNamespaceOnly) {
  testing::TempDir dir;
  auto r = testing::make_regions("a", 1, shm::kCreatedStandalone);
  testing::set_gpu(r, 0, shm::kAnyGpu, 1024 * kMi, 100, 100, shm::ComputeMode::kBurst);
  const std::uint64_t own_ns = *shm::read_pidns_inode(getpid());
  const auto gone = static_cast<std::uint32_t>(exited_child());
  testing::add_process(r, 0, gone, 0, 0, 100 * kMi, 300 * kMi, 1);                        // gone
  testing::add_process(r, 1, static_cast<std::uint32_t>(getpid()), 0, 0, 7 * kMi, 0, 1);  // alive
  testing::add_process(r, 2, gone, 0, 0, 11 * kMi, 0, 1);  // another namespace's pid
  r.usage->slots[0].pidns_inode = own_ns;
  r.usage->slots[1].pidns_inode = own_ns;
  testing::write_regions(r, dir.path());

  EXPECT_EQ(reclaim_gone_processes_in(dir.path().string()), 1u);
  EXPECT_EQ(reclaim_gone_processes(dir.path().string()), 0u);  // once

  const auto usage = shm::UsageMapping::open(dir.path() / "usage", shm::Access::kReadOnly);
  EXPECT_EQ(usage.region().gpus[0].used_bytes.load(), 18 * kMi);
  EXPECT_EQ(usage.region().slots[0].state.load(),
            static_cast<std::uint32_t>(shm::SlotState::kFree));
}

TEST(GoneProcesses, LeavesWhatItCannotOpenAlone) {
  testing::TempDir dir;
  EXPECT_EQ(reclaim_gone_processes(dir.path().string()), 0u);                   // no usage region
  EXPECT_EQ(reclaim_gone_processes_in((dir.path() / "nothing").string()), 0u);  // no folder
}

}  // namespace
}  // namespace cushare::tools
