// Who launches on the per-thread default stream (shim/gate/per_thread_stream.hpp).
#include "shim/gate/per_thread_stream.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace cushare::shim::gate {
namespace {

TEST(PerThreadStreamLaunchers, NobodyYetIsNobodysAlone) {
  PerThreadStreamLaunchers launchers;
  EXPECT_FALSE(launchers.only(1));
}

TEST(PerThreadStreamLaunchers, OneThreadAloneRecordsOnItsOwnStream) {
  PerThreadStreamLaunchers launchers;
  for (int i = 0; i < 3; ++i) launchers.on_launch(7);
  EXPECT_TRUE(launchers.only(7));
  EXPECT_FALSE(launchers.only(8));  // another thread (the poller) uses the legacy stream
}

TEST(PerThreadStreamLaunchers, ASecondThreadMakesItTheLegacyStreamForGood) {
  PerThreadStreamLaunchers launchers;
  launchers.on_launch(7);
  launchers.on_launch(8);
  EXPECT_FALSE(launchers.only(7));
  EXPECT_FALSE(launchers.only(8));
  // Only the first thread again: its earlier batches may still hold the
  // other thread's launches, so it stays shared.
  launchers.on_launch(7);
  EXPECT_FALSE(launchers.only(7));
  launchers.clear();  // a forked child starts again
  launchers.on_launch(8);
  EXPECT_TRUE(launchers.only(8));
}

TEST(PerThreadStreamLaunchers, ThreadsRacingForTheFirstLaunchLeaveItShared) {
  for (int round = 0; round < 200; ++round) {
    PerThreadStreamLaunchers launchers;
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (std::uint64_t id = 1; id <= 4; ++id) {
      threads.emplace_back([&, id] {
        while (!go.load(std::memory_order_acquire)) {
        }
        launchers.on_launch(id);
      });
    }
    go.store(true, std::memory_order_release);
    for (auto& t : threads) t.join();
    for (std::uint64_t id = 1; id <= 4; ++id) EXPECT_FALSE(launchers.only(id)) << round;
  }
}

TEST(PerThreadStreamLaunchers, ThreadIdsAreDistinctAndStable) {
  const std::uint64_t mine = launching_thread_id();
  EXPECT_NE(mine, 0u);
  EXPECT_EQ(launching_thread_id(), mine);
  std::uint64_t other = 0;
  std::thread([&] { other = launching_thread_id(); }).join();
  EXPECT_NE(other, 0u);
  EXPECT_NE(other, mine);
  std::uint64_t later = 0;  // a thread begun after another ended is another
  std::thread([&] { later = launching_thread_id(); }).join();
  EXPECT_NE(later, other);
}

}  // namespace
}  // namespace cushare::shim::gate
