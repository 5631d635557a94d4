#include "scheduler/entitlement.hpp"

#include <gtest/gtest.h>

namespace cushare::sched {
namespace {

TenantPolicy burst(std::uint32_t w) {
  return {.weight = w, .limit_pct = 100, .mode = Mode::kBurst};
}
TenantPolicy capped(std::uint32_t pct) {
  return {.weight = pct, .limit_pct = pct, .mode = Mode::kCapped};
}

TEST(Entitlement, LoneBurstGetsTheWholeGpu) {
  EXPECT_EQ(entitlements_ppm({burst(30)}), (std::vector<std::uint32_t>{1'000'000}));
}

TEST(Entitlement, LoneCappedGetsItsLimitOnly) {
  EXPECT_EQ(entitlements_ppm({capped(30)}), (std::vector<std::uint32_t>{300'000}));
}

TEST(Entitlement, BurstSharesFollowWeights) {
  EXPECT_EQ(entitlements_ppm({burst(1), burst(3)}), (std::vector<std::uint32_t>{250'000, 750'000}));
  EXPECT_EQ(entitlements_ppm({burst(5), burst(5), burst(5), burst(5)}),
            (std::vector<std::uint32_t>(4, 250'000)));
}

TEST(Entitlement, CappedPairLeavesTheRestIdle) {
  EXPECT_EQ(entitlements_ppm({capped(30), capped(50)}),
            (std::vector<std::uint32_t>{300'000, 500'000}));
}

TEST(Entitlement, WhatACapLeavesGoesToTheOthers) {
  // Equal weights would give 50/50; the capped one stops at 20.
  auto e = entitlements_ppm({{.weight = 50, .limit_pct = 20, .mode = Mode::kCapped}, burst(50)});
  EXPECT_EQ(e, (std::vector<std::uint32_t>{200'000, 800'000}));
  // Two capped below their fair share, one burst: the burst one takes the rest.
  e = entitlements_ppm({capped(10), capped(20), burst(10)});
  EXPECT_EQ(e, (std::vector<std::uint32_t>{100'000, 200'000, 700'000}));
}

TEST(Entitlement, CappedAboveFairShareGetsFairShare) {
  auto e = entitlements_ppm({{.weight = 1, .limit_pct = 80, .mode = Mode::kCapped}, burst(1)});
  EXPECT_EQ(e, (std::vector<std::uint32_t>{500'000, 500'000}));
}

TEST(Entitlement, EmptyAndZeroWeightAreHandled) {
  EXPECT_TRUE(entitlements_ppm({}).empty());
  auto e = entitlements_ppm({{.weight = 0, .limit_pct = 100, .mode = Mode::kBurst}, burst(1)});
  EXPECT_EQ(e, (std::vector<std::uint32_t>{500'000, 500'000}));
}

}  // namespace
}  // namespace cushare::sched
