#include "shim/accounting/pointer_table.hpp"

#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

namespace cushare::shim {
namespace {

Charge charge(std::uint64_t bytes, std::uint8_t gpu = 0) {
  return Charge{bytes, gpu, ChargeKind::kDevice, 0};
}

TEST(PointerTable, InsertTakeFind) {
  static PointerTable t;
  EXPECT_FALSE(t.take(0x1000));
  ASSERT_TRUE(t.insert(0x1000, charge(42, 3)));
  auto f = t.find(0x1000);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->bytes, 42u);
  EXPECT_EQ(f->gpu, 3);
  auto g = t.take(0x1000);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->bytes, 42u);
  EXPECT_FALSE(t.take(0x1000)) << "a second free of the same pointer finds nothing";
  EXPECT_EQ(t.size(), 0u);
}

TEST(PointerTable, MatchesAMapUnderRandomOperations) {
  static PointerTable t;
  std::unordered_map<std::uint64_t, std::uint64_t> model;
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> keys;
  for (int i = 0; i < 200000; ++i) {
    // Device-pointer-like keys: 512-byte aligned, clustered, so probes collide.
    const std::uint64_t key = 0x7f0000000000ULL + (rng() % 50000) * 512;
    if (rng() % 3) {
      t.insert(key, charge(key >> 9));
      model[key] = key >> 9;
    } else {
      auto got = t.take(key);
      auto it = model.find(key);
      ASSERT_EQ(got.has_value(), it != model.end()) << i;
      if (got) {
        EXPECT_EQ(got->bytes, it->second);
        model.erase(it);
      }
    }
  }
  EXPECT_EQ(t.size(), model.size());
  for (const auto& [k, v] : model) {
    auto got = t.take(k);
    ASSERT_TRUE(got) << std::hex << k;
    EXPECT_EQ(got->bytes, v);
  }
  EXPECT_EQ(t.size(), 0u);
}

TEST(PointerTable, ConcurrentThreadsKeepEveryEntry) {
  static PointerTable t;
  constexpr int kThreads = 8, kPerThread = 20000;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([th] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::uint64_t key = (static_cast<std::uint64_t>(th) << 40) | ((i + 1) * 512ULL);
        ASSERT_TRUE(t.insert(key, charge(i)));
        if (i % 2) {
          ASSERT_TRUE(t.take(key));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(t.size(), static_cast<std::uint64_t>(kThreads * kPerThread / 2));
}

TEST(PointerTable, SweepRemovesExactlyTheGoneEntries) {
  static PointerTable t;
  // Clustered keys: sweeping one entry shifts later members of its probe run.
  std::uint64_t expected = 0;
  for (std::uint64_t k = 1; k <= 5000; ++k) {
    ASSERT_TRUE(t.insert(0x7f0000000000ULL + k * 512, charge(k)));
    if (k % 3 == 0) expected += k;
  }
  std::uint64_t removed = 0, calls = 0;
  t.sweep([](std::uint64_t key, const Charge& c) { return key && c.bytes % 3 == 0; },
          [&](const Charge& c) {
            removed += c.bytes;
            ++calls;
          });
  EXPECT_EQ(removed, expected);
  EXPECT_EQ(calls, 5000u / 3);
  EXPECT_EQ(t.size(), 5000u - 5000u / 3);
  for (std::uint64_t k = 1; k <= 5000; ++k) {
    const auto f = t.find(0x7f0000000000ULL + k * 512);
    EXPECT_EQ(f.has_value(), k % 3 != 0) << k;
  }
}

TEST(PointerTable, ResetAfterForkDropsEverything) {
  static PointerTable t;
  for (std::uint64_t k = 1; k < 1000; ++k) t.insert(k * 512, charge(k));
  t.reset_after_fork();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.take(512));
  EXPECT_TRUE(t.insert(512, charge(1)));
}

}  // namespace
}  // namespace cushare::shim
