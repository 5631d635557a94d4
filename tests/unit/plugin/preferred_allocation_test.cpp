#include "plugin/core/preferred_allocation.hpp"

#include <map>

#include <gtest/gtest.h>

#include "plugin/core/device_id.hpp"
#include "tests/unit/plugin/test_inventory.hpp"

namespace cushare::plugin {
namespace {

using namespace testing;

std::vector<std::string> Units(const std::string& uuid, unsigned first, unsigned count) {
  std::vector<std::string> ids;
  for (unsigned i = 0; i < count; ++i) ids.push_back(FormatDeviceId(uuid, first + i));
  return ids;
}

std::vector<std::string> Concat(std::initializer_list<std::vector<std::string>> parts) {
  std::vector<std::string> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::map<std::string, int> PerGpu(const std::vector<std::string>& ids) {
  std::map<std::string, int> n;
  for (const auto& id : ids) ++n[ParseDeviceId(id).gpu_uuid];
  return n;
}

TEST(PreferredAllocation, BestFitPicksTheFullestGpuThatFits) {
  // A has 60 free, B has 30 free: a request of 25 goes to B.
  const auto available = Concat({Units(kUuidA, 40, 60), Units(kUuidB, 70, 30)});
  const auto got = PreferAllocation(TwoGpus(), available, {}, 25, PackingPolicy::kBestFit,
                                    GpuSpanning::kAny, 100);
  ASSERT_EQ(got.size(), 25u);
  EXPECT_EQ(PerGpu(got), (std::map<std::string, int>{{kUuidB, 25}}));
  EXPECT_EQ(got.front(), FormatDeviceId(kUuidB, 70));  // lowest units first
}

TEST(PreferredAllocation, SpreadPicksTheEmptiestGpu) {
  const auto available = Concat({Units(kUuidA, 40, 60), Units(kUuidB, 70, 30)});
  const auto got = PreferAllocation(TwoGpus(), available, {}, 25, PackingPolicy::kSpread,
                                    GpuSpanning::kAny, 100);
  EXPECT_EQ(PerGpu(got), (std::map<std::string, int>{{kUuidA, 25}}));
}

TEST(PreferredAllocation, BestFitSkipsGpusTooSmall) {
  const auto available = Concat({Units(kUuidA, 40, 60), Units(kUuidB, 70, 30)});
  const auto got = PreferAllocation(TwoGpus(), available, {}, 45, PackingPolicy::kBestFit,
                                    GpuSpanning::kAny, 100);
  EXPECT_EQ(PerGpu(got), (std::map<std::string, int>{{kUuidA, 45}}));
}

TEST(PreferredAllocation, MustIncludeIsKeptAndItsGpuContinued) {
  const auto available = Concat({Units(kUuidA, 0, 100), Units(kUuidB, 0, 100)});
  const std::vector<std::string> must = {FormatDeviceId(kUuidA, 5)};
  const auto got = PreferAllocation(TwoGpus(), available, must, 10, PackingPolicy::kSpread,
                                    GpuSpanning::kAny, 100);
  ASSERT_EQ(got.size(), 10u);
  EXPECT_EQ(got.front(), must.front());
  EXPECT_EQ(PerGpu(got), (std::map<std::string, int>{{kUuidA, 10}}));
}

TEST(PreferredAllocation, LargerThanOneGpuTakesWholeGpusOnOneNumaNode) {
  // NUMA 0: A (whole), D (whole). NUMA 1: B (whole), C (half used).
  const auto inv = FourGpusTwoNuma();
  const auto available = Concat(
      {Units(kUuidA, 0, 100), Units(kUuidB, 0, 100), Units(kUuidC, 50, 50), Units(kUuidD, 0, 100)});
  const auto got =
      PreferAllocation(inv, available, {}, 230, PackingPolicy::kBestFit, GpuSpanning::kAny, 100);
  ASSERT_EQ(got.size(), 230u);
  const auto n = PerGpu(got);
  EXPECT_EQ(n.at(kUuidA), 100);
  EXPECT_EQ(n.at(kUuidD), 100);
  // The remaining 30 by best fit: C (50 free) before B (100 free).
  EXPECT_EQ(n.at(kUuidC), 30);
  EXPECT_FALSE(n.contains(kUuidB));
}

TEST(PreferredAllocation, RemainderPrefersTheSameNumaNode) {
  // Whole GPUs: A and D on NUMA 0; B whole on NUMA 1; C on NUMA 1 partially free.
  auto inv = FourGpusTwoNuma();
  const auto available = Concat(
      {Units(kUuidA, 0, 100), Units(kUuidD, 0, 100), Units(kUuidB, 0, 100), Units(kUuidC, 60, 40)});
  // 100 + 40: one whole GPU from the NUMA node with most whole GPUs (0), then
  // 40 from NUMA 0's other whole GPU rather than C on node 1.
  const auto got =
      PreferAllocation(inv, available, {}, 140, PackingPolicy::kBestFit, GpuSpanning::kAny, 100);
  const auto n = PerGpu(got);
  EXPECT_EQ(n.at(kUuidA), 100);
  EXPECT_EQ(n.at(kUuidD), 40);
  EXPECT_EQ(n.size(), 2u);
}

TEST(PreferredAllocation, NotEnoughReturnsWhatThereIs) {
  const auto available = Units(kUuidB, 0, 5);
  const auto got = PreferAllocation(TwoGpus(), available, {}, 10, PackingPolicy::kBestFit,
                                    GpuSpanning::kAny, 100);
  EXPECT_EQ(got.size(), 5u);
}

TEST(PreferredAllocation, IgnoresUnknownAndMalformedIds) {
  const std::vector<std::string> available = {"junk", "GPU-zzz::1", FormatDeviceId(kUuidA, 1),
                                              FormatDeviceId(kUuidA, 200)};
  const auto got = PreferAllocation(TwoGpus(), available, {}, 1, PackingPolicy::kBestFit,
                                    GpuSpanning::kAny, 100);
  EXPECT_EQ(got, std::vector<std::string>{FormatDeviceId(kUuidA, 1)});
}

TEST(PreferredAllocation, WithoutSpanningARequestNoGpuHoldsIsNotSplit) {
  // 50 + 50 free, a request of 60: no hint that would straddle (50 + 10).
  const auto available = Concat({Units(kUuidA, 50, 50), Units(kUuidB, 50, 50)});
  for (const auto rule : {GpuSpanning::kNone, GpuSpanning::kWhole}) {
    const auto got =
        PreferAllocation(TwoGpus(), available, {}, 60, PackingPolicy::kBestFit, rule, 100);
    EXPECT_TRUE(got.empty()) << ToString(rule) << ": " << got.size() << " IDs proposed";
  }
  const auto any = PreferAllocation(TwoGpus(), available, {}, 60, PackingPolicy::kBestFit,
                                    GpuSpanning::kAny, 100);
  EXPECT_EQ(any.size(), 60u);
}

TEST(PreferredAllocation, WithoutSpanningAFittingRequestStaysOnOneGpu) {
  const auto available = Concat({Units(kUuidA, 50, 50), Units(kUuidB, 30, 70)});
  const auto got = PreferAllocation(TwoGpus(), available, {}, 60, PackingPolicy::kBestFit,
                                    GpuSpanning::kNone, 100);
  EXPECT_EQ(PerGpu(got), (std::map<std::string, int>{{kUuidB, 60}}));
}

TEST(PreferredAllocation, WithoutSpanningMustIncludeIsNotTopedUpFromAnotherGpu) {
  // The kubelet reuses 10 units of A (an init container's) and A has 5 more.
  const auto available = Concat({Units(kUuidA, 0, 15), Units(kUuidB, 0, 100)});
  const auto must = Units(kUuidA, 0, 10);
  const auto got = PreferAllocation(TwoGpus(), available, must, 30, PackingPolicy::kBestFit,
                                    GpuSpanning::kNone, 100);
  EXPECT_EQ(PerGpu(got), (std::map<std::string, int>{{kUuidA, 15}}));
}

TEST(PreferredAllocation, WholeSpanningTakesWholeGpusOnly) {
  const auto inv = FourGpusTwoNuma();
  const auto available = Concat(
      {Units(kUuidA, 0, 100), Units(kUuidB, 0, 100), Units(kUuidC, 50, 50), Units(kUuidD, 0, 100)});
  const auto two =
      PreferAllocation(inv, available, {}, 200, PackingPolicy::kBestFit, GpuSpanning::kWhole, 100);
  EXPECT_EQ(PerGpu(two), (std::map<std::string, int>{{kUuidA, 100}, {kUuidD, 100}}));
  const auto odd =
      PreferAllocation(inv, available, {}, 230, PackingPolicy::kBestFit, GpuSpanning::kWhole, 100);
  EXPECT_TRUE(odd.empty());
  const auto none =
      PreferAllocation(inv, available, {}, 200, PackingPolicy::kBestFit, GpuSpanning::kNone, 100);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace cushare::plugin
