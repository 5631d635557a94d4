// The streams a batch of launches went to (shim/gate/batch_streams.hpp).
#include "shim/gate/batch_streams.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace cushare::shim::gate {
namespace {

CUstream stream(std::uintptr_t n) {
  return reinterpret_cast<CUstream>(0x1000 + 16 * n);
}

std::vector<CUstream> streams_of(const BatchStreams::Taken& taken) {
  std::vector<CUstream> out(taken.streams.begin(), taken.streams.begin() + taken.count);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<CUstream> sorted(std::vector<CUstream> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(BatchStreams, OneStreamIsTheTailAlone) {
  BatchStreams b;
  EXPECT_EQ(b.tail(), BatchStreams::none());
  EXPECT_EQ(b.take().count, 0u);
  for (int i = 0; i < 3; ++i) b.on_launch(stream(1));
  EXPECT_EQ(b.tail(), stream(1));
  const auto taken = b.take();
  EXPECT_EQ(streams_of(taken), std::vector<CUstream>{stream(1)});
  EXPECT_FALSE(taken.overflowed);
}

TEST(BatchStreams, ABatchOverTwoStreamsNamesBoth) {
  BatchStreams b;
  b.on_launch(stream(1));
  b.on_launch(stream(2));
  EXPECT_EQ(b.tail(), stream(2));
  EXPECT_TRUE(b.holds(stream(1)));
  EXPECT_TRUE(b.holds(stream(2)));
  EXPECT_EQ(streams_of(b.take()), sorted({stream(1), stream(2)}));
  // The next batch keeps to the tail's stream: it names that one only.
  b.on_launch(stream(2));
  EXPECT_EQ(streams_of(b.take()), std::vector<CUstream>{stream(2)});
  EXPECT_FALSE(b.holds(stream(1)));
}

// Launches that keep to the tail file nothing; the take that saw it the tail
// filed it again, so the next batch, gone on to another stream, names both.
TEST(BatchStreams, TheTailIsCarriedIntoTheNextBatch) {
  BatchStreams b;
  b.on_launch(stream(1));
  EXPECT_EQ(streams_of(b.take()), std::vector<CUstream>{stream(1)});
  b.on_launch(stream(1));
  b.on_launch(stream(2));
  EXPECT_EQ(streams_of(b.take()), sorted({stream(1), stream(2)}));
}

TEST(BatchStreams, AlternatingStreamsAreNamedOnceEach) {
  BatchStreams b;
  for (int i = 0; i < 9; ++i) b.on_launch(stream(1 + i % 2));
  const auto taken = b.take();
  EXPECT_EQ(taken.count, 2u);
  EXPECT_EQ(streams_of(taken), sorted({stream(1), stream(2)}));
}

TEST(BatchStreams, TheLegacyAndPerThreadHandlesAreStreamsLikeAnyOther) {
  BatchStreams b;
  b.on_launch(nullptr);
  b.on_launch(CU_STREAM_PER_THREAD);
  b.on_launch(stream(1));
  EXPECT_EQ(streams_of(b.take()), sorted({nullptr, CU_STREAM_PER_THREAD, stream(1)}));
}

TEST(BatchStreams, MoreStreamsThanItKeepsAreReported) {
  BatchStreams b;
  for (std::uintptr_t n = 0; n < BatchStreams::kCapacity + 3; ++n) b.on_launch(stream(n));
  const auto taken = b.take();
  EXPECT_EQ(taken.count, BatchStreams::kCapacity + 1);  // the set, and the tail
  EXPECT_TRUE(taken.overflowed);
  const auto next = b.take();
  EXPECT_FALSE(next.overflowed);  // reported once
  EXPECT_EQ(streams_of(next), std::vector<CUstream>{stream(BatchStreams::kCapacity + 2)});
}

TEST(BatchStreams, AStreamARecordDidNotCoverIsFiledAgain) {
  BatchStreams b;
  for (std::uintptr_t n = 1; n <= 4; ++n) b.on_launch(stream(n));
  const auto taken = b.take();
  ASSERT_EQ(streams_of(taken), sorted({stream(1), stream(2), stream(3), stream(4)}));
  b.put_back(taken, stream(2));
  EXPECT_EQ(streams_of(b.take()), sorted({stream(1), stream(3), stream(4)}));

  BatchStreams full;
  for (std::uintptr_t n = 0; n < BatchStreams::kCapacity + 3; ++n) full.on_launch(stream(n));
  full.put_back(full.take(), BatchStreams::none());
  EXPECT_TRUE(full.take().overflowed);  // the overflow is kept too
}

TEST(BatchStreams, ADestroyedStreamLeavesTheSetAndTheTail) {
  BatchStreams b;
  b.on_launch(stream(1));
  b.on_launch(stream(2));
  b.forget(stream(1));
  EXPECT_FALSE(b.holds(stream(1)));
  EXPECT_EQ(streams_of(b.take()), std::vector<CUstream>{stream(2)});
  b.forget(stream(2));  // filed again by the take, and the tail
  EXPECT_FALSE(b.holds(stream(2)));
  EXPECT_EQ(b.tail(), BatchStreams::none());
  EXPECT_EQ(b.take().count, 0u);
  b.on_launch(stream(3));
  EXPECT_EQ(streams_of(b.take()), std::vector<CUstream>{stream(3)});
}

TEST(BatchStreams, ClearForgetsEverything) {
  BatchStreams b;
  for (std::uintptr_t n = 0; n < BatchStreams::kCapacity + 3; ++n) b.on_launch(stream(n));
  b.clear();
  EXPECT_EQ(b.tail(), BatchStreams::none());
  const auto taken = b.take();
  EXPECT_EQ(taken.count, 0u);
  EXPECT_FALSE(taken.overflowed);
}

// Launching threads on streams of their own and one they share, and a
// recorder taking as the tracker does: every launch's stream is named by a
// record that had not finished taking when the launch began. (A launch
// racing a record may be named only by a later one: its stream is filed
// just after it became the tail. Never by none.)
TEST(BatchStreams, NoLaunchIsLeftUncoveredByConcurrentLaunchersAndRecords) {
  constexpr int kThreads = 4;
  constexpr std::uint64_t kLaunches = 100'000;  // per thread, at least
  constexpr std::uint64_t kRecords = 1000;      // at least, while they launch
  BatchStreams b;
  std::atomic<std::uint64_t> finished{0};  // records that took
  std::atomic<int> ready{0};
  std::atomic<int> running{kThreads};
  struct Launch {
    std::uint64_t records_before;  // finished before the launch
    CUstream stream;
  };
  std::vector<std::vector<Launch>> launched(kThreads);
  std::vector<std::vector<CUstream>> records;  // the streams each one named
  const auto record = [&] {
    const auto taken = b.take();
    EXPECT_FALSE(taken.overflowed);  // 1 + kThreads streams
    records.emplace_back(taken.streams.begin(), taken.streams.begin() + taken.count);
    finished.fetch_add(1, std::memory_order_seq_cst);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto& mine = launched[static_cast<std::size_t>(t)];
      mine.reserve(2 * kLaunches);
      ready.fetch_add(1);
      while (ready.load() < kThreads + 1) std::this_thread::yield();
      for (std::uint64_t i = 0; i < kLaunches || finished.load() < kRecords; ++i) {
        const CUstream s = i % 3 == 0 ? stream(0) : stream(1 + static_cast<std::uintptr_t>(t));
        const std::uint64_t before = finished.load(std::memory_order_seq_cst);
        b.on_launch(s);
        mine.push_back({before, s});
        if (i % 64 == 0) std::this_thread::yield();
      }
      running.fetch_sub(1);
    });
  }
  while (ready.load() < kThreads) std::this_thread::yield();
  ready.fetch_add(1);
  while (running.load() > 0) {
    record();
    std::this_thread::yield();
  }
  for (auto& th : threads) th.join();
  record();  // the last batch

  for (const auto& mine : launched) {
    for (const Launch& l : mine) {
      auto it = records.begin() + static_cast<std::ptrdiff_t>(l.records_before);
      while (it != records.end() && std::find(it->begin(), it->end(), l.stream) == it->end()) ++it;
      ASSERT_NE(it, records.end())
          << "a launch after record " << l.records_before << " was never covered";
    }
  }
  EXPECT_GE(records.size(), kRecords);
}

}  // namespace
}  // namespace cushare::shim::gate
