// Pure pieces of the shim: the virtual memory view, its environment, UUID
// formatting and the capture tracker.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "shim/accounting/capture_tracker.hpp"
#include "shim/accounting/memory_view.hpp"
#include "shim/devices/device_uuid.hpp"
#include "shim/gate/duty_cycle_plan.hpp"
#include "shim/process/shim_env.hpp"

namespace cushare::shim {
namespace {

constexpr std::uint64_t GiB = 1ULL << 30;

TEST(MemoryView, QuotaBelowTheCard) {
  const auto v = virtual_memory(4 * GiB, 1 * GiB, 80 * GiB, 70 * GiB);
  EXPECT_EQ(v.total, 4 * GiB);
  EXPECT_EQ(v.free, 3 * GiB);
  EXPECT_EQ(v.used, 1 * GiB);
}

TEST(MemoryView, FreeIsClampedByRealFreeAndNeverNegative) {
  EXPECT_EQ(virtual_memory(4 * GiB, 1 * GiB, 80 * GiB, 2 * GiB).free, 2 * GiB);
  const auto over = virtual_memory(4 * GiB, 5 * GiB, 80 * GiB, 70 * GiB);  // stale slots
  EXPECT_EQ(over.free, 0u);
  EXPECT_EQ(over.used, 4 * GiB);
}

TEST(MemoryView, QuotaAboveTheCardShowsTheCard) {
  const auto v = virtual_memory(100 * GiB, 0, 80 * GiB, 79 * GiB);
  EXPECT_EQ(v.total, 80 * GiB);
  EXPECT_EQ(v.free, 79 * GiB);
}

TEST(MemoryView, UnlimitedIsTheRealView) {
  const auto v = virtual_memory(shm::kUnlimited, 9 * GiB, 80 * GiB, 70 * GiB);
  EXPECT_EQ(v.total, 80 * GiB);
  EXPECT_EQ(v.free, 70 * GiB);
  EXPECT_EQ(v.used, 10 * GiB);
}

shm::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(ShimEnv, Defaults) {
  auto e = shim_env_from(env_of({}), 1000, false);
  ASSERT_TRUE(e) << e.error();
  EXPECT_FALSE(e->disabled);
  EXPECT_FALSE(e->oom_backtrace);
  EXPECT_EQ(e->run_dir, "/tmp/cushare-1000");
  EXPECT_EQ(shim_env_from(env_of({}), 0, true)->run_dir, "/var/run/cushare");
}

TEST(ShimEnv, Flags) {
  auto e = shim_env_from(env_of({{"CUSHARE_DISABLE", "1"},
                                 {"CUSHARE_OOM_BACKTRACE", "yes"},
                                 {"CUSHARE_RUN_DIR", "/run/x"}}),
                         0, false);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->disabled);
  EXPECT_TRUE(e->oom_backtrace);
  EXPECT_EQ(e->run_dir, "/run/x");
  EXPECT_FALSE(shim_env_from(env_of({{"CUSHARE_DISABLE", "0"}}), 0, false)->disabled);
}

TEST(ShimEnv, MalformedValuesNameTheVariable) {
  for (auto [name, value] : std::map<std::string, std::string>{{"CUSHARE_DISABLE", "maybe"},
                                                               {"CUSHARE_OOM_BACKTRACE", ""},
                                                               {"CUSHARE_RUN_DIR", "relative"}}) {
    auto e = shim_env_from(env_of({{name, value}}), 0, false);
    ASSERT_FALSE(e) << name;
    EXPECT_NE(e.error().find(name), std::string::npos) << e.error();
  }
}

TEST(DeviceUuid, FormatsLikeNvml) {
  CUuuid u{};
  for (int i = 0; i < 16; ++i) u.bytes[i] = static_cast<char>(0x10 * (i % 16) + i);
  EXPECT_EQ(format_gpu_uuid(u), "GPU-00112233-4455-6677-8899-aabbccddeeff");
}

TEST(CaptureTracker, TracksBeginAndEnd) {
  auto* s1 = reinterpret_cast<CUstream>(0x1000);
  auto* s2 = reinterpret_cast<CUstream>(0x2000);
  EXPECT_FALSE(stream_is_capturing(s1));
  capture_began(s1);
  EXPECT_TRUE(stream_is_capturing(s1));
  EXPECT_FALSE(stream_is_capturing(s2));
  capture_ended(s1);
  EXPECT_FALSE(stream_is_capturing(s1));
  capture_ended(s2);  // never began: ignored
  EXPECT_FALSE(stream_is_capturing(s2));
}

TEST(CaptureTracker, OverflowTreatsEveryStreamAsCapturing) {
  for (std::uintptr_t i = 1; i <= 300; ++i) capture_began(reinterpret_cast<CUstream>(i * 16));
  EXPECT_TRUE(stream_is_capturing(reinterpret_cast<CUstream>(0xdead0)));
  for (std::uintptr_t i = 1; i <= 300; ++i) capture_ended(reinterpret_cast<CUstream>(i * 16));
  EXPECT_FALSE(stream_is_capturing(reinterpret_cast<CUstream>(0xdead0)));
  EXPECT_FALSE(stream_is_capturing(reinterpret_cast<CUstream>(16)));
}

TEST(CaptureTracker, AsksTheDriverWhileACaptureIsUnderWay) {
  // The driver's view: 0x3000 joined a capture by waiting on a captured
  // event (no hook saw it begin); 0x4000 is an ordinary stream.
  set_capture_status_query([](CUstream s, CUstreamCaptureStatus* status) {
    *status = s == reinterpret_cast<CUstream>(0x3000) ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                      : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  });
  auto* origin = reinterpret_cast<CUstream>(0x1000);
  auto* joined = reinterpret_cast<CUstream>(0x3000);
  auto* other = reinterpret_cast<CUstream>(0x4000);
  EXPECT_FALSE(stream_is_capturing(joined));  // no capture under way: the driver is not asked
  capture_began(origin);
  EXPECT_TRUE(stream_is_capturing(joined));
  EXPECT_FALSE(stream_is_capturing(other));
  // An error (the legacy stream while another stream captures) counts as capturing.
  set_capture_status_query(
      [](CUstream, CUstreamCaptureStatus*) { return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; });
  EXPECT_TRUE(stream_is_capturing(nullptr));
  capture_ended(origin);
  EXPECT_FALSE(stream_is_capturing(nullptr));
  set_capture_status_query(nullptr);
}

TEST(DutyCyclePlan, SlotsOfOneGpuLieEndToEndInIdOrderStretchedOverTheUnclaimedPart) {
  const std::vector<DutyClaim> live{{"a", "GPU-1", 30}, {"b", "GPU-1", 50}, {"c", "GPU-2", 40}};
  // Caps of 30 and 50 leave 20 % unclaimed: slots of 37.5 % and 62.5 %.
  EXPECT_EQ(duty_slot(live, live[0]), (DutySlot{0, 375'000}));
  EXPECT_EQ(duty_slot(live, live[1]), (DutySlot{375'000, 625'000}));
  EXPECT_EQ(duty_slot(live, live[2]), (DutySlot{0, kPeriodPpm}));  // alone on its GPU
  // Its own claim missing from the table (it could not be written): the same.
  const std::vector<DutyClaim> others{live[1], live[2]};
  EXPECT_EQ(duty_slot(others, live[0]), (DutySlot{0, 375'000}));
  // Caps of 100 or more: slots as long as the limits, wrapping (and overlapping).
  const std::vector<DutyClaim> full{{"a", "G", 70}, {"b", "G", 60}};
  EXPECT_EQ(duty_slot(full, full[1]), (DutySlot{700'000, 600'000}));
  const std::vector<DutyClaim> more{{"a", "G", 70}, {"b", "G", 60}, {"c", "G", 10}};
  EXPECT_EQ(duty_slot(more, more[2]), (DutySlot{300'000, 100'000}));
  const std::vector<DutyClaim> exact{{"a", "G", 40}, {"b", "G", 60}};
  EXPECT_EQ(duty_slot(exact, exact[1]), (DutySlot{400'000, 600'000}));
}

constexpr std::uint64_t kPeriod = 100'000'000;  // 100 ms
constexpr std::uint64_t kBase = 1'000 * kPeriod;

// Slot [30 %, 80 %) of each period, a budget of 40 ms of busy time.
DutyStanding standing(std::uint64_t busy_ns, DutySlot slot = {300'000, 500'000}) {
  return {.period = kPeriod, .slot = slot, .budget_ns = 40'000'000, .busy_ns = busy_ns};
}

TEST(DutyCyclePlan, WaitsUntilItsOwnSlotOpens) {
  EXPECT_EQ(duty_wait_ns(kBase + 10'000'000, standing(0), 0, 0), 20'000'000u);
  EXPECT_EQ(duty_wait_ns(kBase + 30'000'000, standing(0), 0, 0), 0u);
  EXPECT_EQ(duty_wait_ns(kBase + 79'000'000, standing(0), 0, 0), 0u);
  EXPECT_EQ(duty_wait_ns(kBase + 80'000'000, standing(0), 0, 0), 50'000'000u);
  // Close to the slot's end, the next slot.
  EXPECT_EQ(duty_wait_ns(kBase + 79'500'000, standing(0), 1'000'000, 1'000'000), 50'500'000u);
  // A slot that wraps past the period's end.
  const DutySlot wraps{800'000, 400'000};
  EXPECT_EQ(duty_wait_ns(kBase + 5'000'000, standing(0, wraps), 0, 0), 0u);
  EXPECT_EQ(duty_wait_ns(kBase + 50'000'000, standing(0, wraps), 0, 0), 30'000'000u);
  EXPECT_EQ(duty_position(kBase + 5'000'000, kPeriod, wraps).open_ns, kBase - 20'000'000);
}

TEST(DutyCyclePlan, AHugePeriodDoesNotOverflowTheSlot) {
  // A quantum of an hour from the limits region: period x ppm is past 2^64.
  constexpr std::uint64_t kHour = 3'600'000'000'000;
  const DutyPosition p = duty_position(kBase, 10 * kHour, {500'000, 250'000});
  EXPECT_EQ(p.length, 10 * kHour / 4);
  EXPECT_LT(p.phase, 10 * kHour);
}

TEST(DutyCyclePlan, StopsForTheRestOfTheSlotOnceBusyForItsBudget) {
  const std::uint64_t now = kBase + 60'000'000;                           // 30 ms into the slot
  EXPECT_EQ(duty_open_ns(now, standing(25'000'000), 0, 0), 15'000'000u);  // the budget binds
  EXPECT_EQ(duty_open_ns(now, standing(10'000'000), 0, 0), 20'000'000u);  // the slot binds
  EXPECT_EQ(duty_open_ns(now, standing(25'000'000), 1'000'000, 1'000'000),
            14'000'000u);  // less the lead
  EXPECT_EQ(duty_open_ns(now, standing(39'000'000), 1'000'000, 1'000'000), 0u);
  // Spent: until the slot opens again.
  EXPECT_EQ(duty_wait_ns(now, standing(40'000'000), 0, 0), 70'000'000u);
  EXPECT_EQ(duty_wait_ns(now, standing(39'999'999), 0, 0), 0u);
}

}  // namespace
}  // namespace cushare::shim
