// The quiet window of a measured call: it waits for the memory calls in
// flight, holds back new ones until it closes, and says when it could not
// get quiet in time. Orderings are forced with flags; a sleep only gives a
// wrong implementation the time to show itself, never decides a pass.
#include "shim/accounting/memory_quiescence.hpp"

#include "shm/process_slots.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

namespace cushare::shim {
namespace {

struct Process {
  Process() { st.slot = slot.get(); }
  std::unique_ptr<shm::ProcessSlot> slot = std::make_unique<shm::ProcessSlot>();
  AllocationState st;
  std::uint64_t in_flight() const {
    return slot->memory_ops_begun.load() - slot->memory_ops_ended.load();
  }
};

void spin_until(const std::atomic<bool>& flag) {
  while (!flag.load()) std::this_thread::yield();
}

TEST(QuietWindow, IsQuietAtOnceWithNoMemoryCallInFlight) {
  Process p;
  { const MemoryOp op(&p.st); }
  const QuietWindow window(p.st);
  EXPECT_TRUE(window.quiet());
}

// Another thread is inside a call made by `enter` for 20 ms while a window
// opens: the window is quiet only once the call ended (a host too slow to
// end it within the wait leaves the window untrusted instead).
template <class Enter>
void expect_window_waits_for(Process& p, Enter enter) {
  std::atomic<bool> inside{false}, ending{false};
  std::thread caller([&] {
    const auto op = enter();
    inside = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ending = true;
  });
  spin_until(inside);
  {
    const QuietWindow window(p.st);
    EXPECT_TRUE(ending.load() || !window.quiet()) << "quiet while a call was in flight";
  }
  caller.join();
}

TEST(QuietWindow, WaitsForTheMemoryCallsInFlight) {
  Process p;
  expect_window_waits_for(p, [&] { return std::make_unique<MemoryOp>(&p.st); });
  EXPECT_EQ(p.in_flight(), 0u);
}

TEST(QuietWindow, HoldsBackNewMemoryCallsUntilItCloses) {
  Process p;
  std::atomic<bool> started{false}, entered{false}, closing{false}, went_on_inside{false};
  std::unique_ptr<QuietWindow> window = std::make_unique<QuietWindow>(p.st);
  ASSERT_TRUE(window->quiet());
  std::thread caller([&] {
    started = true;
    const MemoryOp op(&p.st);
    went_on_inside = !closing.load();
    entered = true;
  });
  spin_until(started);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  // A call that went on inside the window (after waiting as long as a
  // measurement may) spoiled it.
  EXPECT_TRUE(!entered.load() || !window->quiet()) << "a memory call went on inside the window";
  const bool quiet = window->quiet();
  closing = true;
  window.reset();
  caller.join();
  EXPECT_TRUE(entered.load());
  EXPECT_TRUE(!went_on_inside.load() || !quiet);
  EXPECT_EQ(p.in_flight(), 0u);
}

TEST(QuietWindow, LetsTheMeasuringThreadsOwnCallsThrough) {
  Process p;
  const MemoryOp outer(&p.st);  // the measurement runs inside a memory call
  const QuietWindow window(p.st);
  EXPECT_TRUE(window.quiet()) << "it waited for its own thread's call";
  const MemoryOp inner(&p.st);  // and makes one inside its window
  EXPECT_EQ(p.in_flight(), 3u) << "the outer call, the window, the inner call";
  EXPECT_TRUE(window.quiet());
}

TEST(QuietWindow, IsNotQuietWhenACallOutlastsTheWait) {
  Process p;
  std::atomic<bool> inside{false}, release{false};
  std::thread caller([&] {
    const MemoryOp op(&p.st);
    inside = true;
    spin_until(release);
  });
  spin_until(inside);
  const auto t0 = std::chrono::steady_clock::now();
  {
    const QuietWindow window(p.st);
    EXPECT_FALSE(window.quiet());
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::nanoseconds(kQuietWaitNs));
  }
  release = true;
  caller.join();
}

TEST(QuietWindow, ACallHeldBackTooLongGoesOnAndSpoilsTheWindow) {
  Process p;
  const QuietWindow window(p.st);
  ASSERT_TRUE(window.quiet());
  std::thread caller([&] { const MemoryOp op(&p.st); });
  caller.join();  // returns by itself after kQuietWaitNs
  EXPECT_FALSE(window.quiet()) << "a call went on inside the window";
}

TEST(QuietWindow, IsAMemoryCallInFlightToTheDaemon) {
  Process p;
  const shm::MemoryOpsMark before = shm::mark_memory_ops(*p.slot);
  {
    const QuietWindow window(p.st);
    EXPECT_FALSE(shm::mark_memory_ops(*p.slot).quiet);
  }
  EXPECT_FALSE(shm::memory_ops_quiet_since(*p.slot, before));
  EXPECT_TRUE(shm::mark_memory_ops(*p.slot).quiet);
}

TEST(QuietWindow, WaitsForSynchronisationsOnceThePoolsAreInUse) {
  Process p;
  {
    const SyncOp before_pools;  // nothing to trim yet: not counted
    const QuietWindow window(p.st);
    EXPECT_TRUE(window.quiet());
  }
  note_pools_in_use();
  expect_window_waits_for(p, [] { return std::make_unique<SyncOp>(); });
  EXPECT_EQ(p.slot->memory_ops_begun.load() - p.slot->memory_ops_ended.load(), 0u)
      << "the daemon does not see synchronisations";
}

TEST(QuietWindow, ANullStateCountsNothing) {
  Process p;
  const QuietWindow window(p.st);
  const std::uint64_t begun = p.slot->memory_ops_begun.load();
  const MemoryOp op(nullptr);  // the shim passing calls through
  EXPECT_EQ(p.slot->memory_ops_begun.load(), begun);
}

}  // namespace
}  // namespace cushare::shim
