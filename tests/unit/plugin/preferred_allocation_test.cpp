#include "plugin/core/preferred_allocation.hpp"

#include <map>

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

std::vector<std::string> concat(std::initializer_list<std::vector<std::string>> parts) {
  std::vector<std::string> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::map<std::string, int> per_gpu(const std::vector<std::string>& ids) {
  std::map<std::string, int> n;
  for (const auto& id : ids) ++n[parse_device_id(id).gpu_uuid];
  return n;
}

TEST(PreferredAllocation, BestFitPicksTheFullestGpuThatFits) {
  // A has 60 free, B has 30 free: a request of 25 goes to B.
  const auto available = concat({unit_ids(kUuidA, 40, 60), unit_ids(kUuidB, 70, 30)});
  const auto got = prefer_allocation(two_gpus(), available, {}, 25, PackingPolicy::kBestFit,
                                     GpuSpanning::kAny, 100);
  ASSERT_EQ(got.size(), 25u);
  EXPECT_EQ(per_gpu(got), (std::map<std::string, int>{{kUuidB, 25}}));
  EXPECT_EQ(got.front(), format_device_id(kUuidB, 70));  // lowest units first
}

TEST(PreferredAllocation, SpreadPicksTheEmptiestGpu) {
  const auto available = concat({unit_ids(kUuidA, 40, 60), unit_ids(kUuidB, 70, 30)});
  const auto got = prefer_allocation(two_gpus(), available, {}, 25, PackingPolicy::kSpread,
                                     GpuSpanning::kAny, 100);
  EXPECT_EQ(per_gpu(got), (std::map<std::string, int>{{kUuidA, 25}}));
}

TEST(PreferredAllocation, BestFitSkipsGpusTooSmall) {
  const auto available = concat({unit_ids(kUuidA, 40, 60), unit_ids(kUuidB, 70, 30)});
  const auto got = prefer_allocation(two_gpus(), available, {}, 45, PackingPolicy::kBestFit,
                                     GpuSpanning::kAny, 100);
  EXPECT_EQ(per_gpu(got), (std::map<std::string, int>{{kUuidA, 45}}));
}

TEST(PreferredAllocation, MustIncludeIsKeptAndItsGpuContinued) {
  const auto available = concat({unit_ids(kUuidA, 0, 100), unit_ids(kUuidB, 0, 100)});
  const std::vector<std::string> must = {format_device_id(kUuidA, 5)};
  const auto got = prefer_allocation(two_gpus(), available, must, 10, PackingPolicy::kSpread,
                                     GpuSpanning::kAny, 100);
  ASSERT_EQ(got.size(), 10u);
  EXPECT_EQ(got.front(), must.front());
  EXPECT_EQ(per_gpu(got), (std::map<std::string, int>{{kUuidA, 10}}));
}

TEST(PreferredAllocation, LargerThanOneGpuTakesWholeGpusOnOneNumaNode) {
  // NUMA 0: A (whole), D (whole). NUMA 1: B (whole), C (half used).
  const auto inv = four_gpus_two_numa();
  const auto available = concat({unit_ids(kUuidA, 0, 100), unit_ids(kUuidB, 0, 100),
                                 unit_ids(kUuidC, 50, 50), unit_ids(kUuidD, 0, 100)});
  const auto got =
      prefer_allocation(inv, available, {}, 230, PackingPolicy::kBestFit, GpuSpanning::kAny, 100);
  ASSERT_EQ(got.size(), 230u);
  const auto n = per_gpu(got);
  EXPECT_EQ(n.at(kUuidA), 100);
  EXPECT_EQ(n.at(kUuidD), 100);
  // The remaining 30 by best fit: C (50 free) before B (100 free).
  EXPECT_EQ(n.at(kUuidC), 30);
  EXPECT_FALSE(n.contains(kUuidB));
}

TEST(PreferredAllocation, RemainderPrefersTheSameNumaNode) {
  // Whole GPUs: A and D on NUMA 0; B whole on NUMA 1; C on NUMA 1 partially free.
  auto inv = four_gpus_two_numa();
  const auto available = concat({unit_ids(kUuidA, 0, 100), unit_ids(kUuidD, 0, 100),
                                 unit_ids(kUuidB, 0, 100), unit_ids(kUuidC, 60, 40)});
  // 100 + 40: one whole GPU from the NUMA node with most whole GPUs (0), then
  // 40 from NUMA 0's other whole GPU rather than C on node 1.
  const auto got =
      prefer_allocation(inv, available, {}, 140, PackingPolicy::kBestFit, GpuSpanning::kAny, 100);
  const auto n = per_gpu(got);
  EXPECT_EQ(n.at(kUuidA), 100);
  EXPECT_EQ(n.at(kUuidD), 40);
  EXPECT_EQ(n.size(), 2u);
}

TEST(PreferredAllocation, NotEnoughReturnsWhatThereIs) {
  const auto available = unit_ids(kUuidB, 0, 5);
  const auto got = prefer_allocation(two_gpus(), available, {}, 10, PackingPolicy::kBestFit,
                                     GpuSpanning::kAny, 100);
  EXPECT_EQ(got.size(), 5u);
}

TEST(PreferredAllocation, IgnoresUnknownAndMalformedIds) {
  const std::vector<std::string> available = {"junk", "GPU-zzz::1", format_device_id(kUuidA, 1),
                                              format_device_id(kUuidA, 200)};
  const auto got = prefer_allocation(two_gpus(), available, {}, 1, PackingPolicy::kBestFit,
                                     GpuSpanning::kAny, 100);
  EXPECT_EQ(got, std::vector<std::string>{format_device_id(kUuidA, 1)});
}

TEST(PreferredAllocation, WithoutSpanningARequestNoGpuHoldsIsNotSplit) {
  // 50 + 50 free, a request of 60: no hint that would straddle (50 + 10).
  const auto available = concat({unit_ids(kUuidA, 50, 50), unit_ids(kUuidB, 50, 50)});
  for (const auto rule : {GpuSpanning::kNone, GpuSpanning::kWhole}) {
    const auto got =
        prefer_allocation(two_gpus(), available, {}, 60, PackingPolicy::kBestFit, rule, 100);
    EXPECT_TRUE(got.empty()) << to_string(rule) << ": " << got.size() << " IDs proposed";
  }
  const auto any = prefer_allocation(two_gpus(), available, {}, 60, PackingPolicy::kBestFit,
                                     GpuSpanning::kAny, 100);
  EXPECT_EQ(any.size(), 60u);
}

TEST(PreferredAllocation, WithoutSpanningAFittingRequestStaysOnOneGpu) {
  const auto available = concat({unit_ids(kUuidA, 50, 50), unit_ids(kUuidB, 30, 70)});
  const auto got = prefer_allocation(two_gpus(), available, {}, 60, PackingPolicy::kBestFit,
                                     GpuSpanning::kNone, 100);
  EXPECT_EQ(per_gpu(got), (std::map<std::string, int>{{kUuidB, 60}}));
}

TEST(PreferredAllocation, WithoutSpanningMustIncludeIsNotTopedUpFromAnotherGpu) {
  // The kubelet reuses 10 units of A (an init container's) and A has 5 more.
  const auto available = concat({unit_ids(kUuidA, 0, 15), unit_ids(kUuidB, 0, 100)});
  const auto must = unit_ids(kUuidA, 0, 10);
  const auto got = prefer_allocation(two_gpus(), available, must, 30, PackingPolicy::kBestFit,
                                     GpuSpanning::kNone, 100);
  EXPECT_EQ(per_gpu(got), (std::map<std::string, int>{{kUuidA, 15}}));
}

TEST(PreferredAllocation, WholeSpanningTakesWholeGpusOnly) {
  const auto inv = four_gpus_two_numa();
  const auto available = concat({unit_ids(kUuidA, 0, 100), unit_ids(kUuidB, 0, 100),
                                 unit_ids(kUuidC, 50, 50), unit_ids(kUuidD, 0, 100)});
  const auto two =
      prefer_allocation(inv, available, {}, 200, PackingPolicy::kBestFit, GpuSpanning::kWhole, 100);
  EXPECT_EQ(per_gpu(two), (std::map<std::string, int>{{kUuidA, 100}, {kUuidD, 100}}));
  const auto odd =
      prefer_allocation(inv, available, {}, 230, PackingPolicy::kBestFit, GpuSpanning::kWhole, 100);
  EXPECT_TRUE(odd.empty());
  const auto none =
      prefer_allocation(inv, available, {}, 200, PackingPolicy::kBestFit, GpuSpanning::kNone, 100);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace cushare::plugin
