#include <gtest/gtest.h>

#include "node/set_request.hpp"
#include "region_fixture.hpp"
#include "scenario.hpp"
#include "shm/limits_seqlock.hpp"

namespace cushare::tools {
namespace {

constexpr std::uint64_t kGi = 1ull << 30;

TEST(SetArgs, ParseOrExplain) {
  EXPECT_EQ(parse_memory_limit_arg("8Gi").amount.bytes, 8 * kGi);
  EXPECT_TRUE(parse_memory_limit_arg("none").unlimited);
  EXPECT_EQ(parse_memory_limit_arg("25%").amount.percent_milli, 25'000u);
  EXPECT_EQ(parse_compute_limit_arg("50%"), 50u);
  EXPECT_EQ(parse_weight_arg("7"), 7u);
  EXPECT_EQ(parse_mode_arg("capped"), shm::ComputeMode::kCapped);
  EXPECT_EQ(parse_memory_limit_arg("1.5Gi").amount.bytes, 3 * kGi / 2);
  EXPECT_EQ(parse_memory_limit_arg("1e9").amount.bytes, 1'000'000'000u);
  for (const char* bad : {"", "8 Gi", "-1Gi", "8Qi", "101%", "12m"})
    EXPECT_THROW(parse_memory_limit_arg(bad), InvalidRequest) << bad;
  EXPECT_THROW(parse_compute_limit_arg("0"), InvalidRequest);
  EXPECT_THROW(parse_compute_limit_arg("101"), InvalidRequest);
  EXPECT_THROW(parse_weight_arg("0"), InvalidRequest);
  EXPECT_THROW(parse_weight_arg("10001"), InvalidRequest);
  EXPECT_THROW(parse_mode_arg("fast"), InvalidRequest);
  try {
    parse_memory_limit_arg("8Qi");
  } catch (const InvalidRequest& e) {
    EXPECT_NE(std::string(e.what()).find("--memory-limit"), std::string::npos) << e.what();
  }
}

// A zero quota allows nothing and "1.5" (2 bytes, rounded up) is a typo for
// 1.5Gi: both are refused with the reason, not stored.
TEST(SetArgs, RefusesZeroAndFractionalByteCounts) {
  auto message = [](const char* text) {
    try {
      parse_memory_limit_arg(text);
    } catch (const InvalidRequest& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  for (const char* zero : {"0", "0Gi", "0.0", "0%"})
    EXPECT_NE(message(zero).find("--memory-limit"), std::string::npos) << zero;
  EXPECT_NE(message("0").find("zero quota"), std::string::npos) << message("0");
  EXPECT_NE(message("0Mi").find("zero quota"), std::string::npos) << message("0Mi");
  EXPECT_NE(message("1.5").find("not a whole number of bytes"), std::string::npos)
      << message("1.5");
  EXPECT_NE(message("1.3Ki").find("not a whole number of bytes"), std::string::npos);
  EXPECT_EQ(message("25%"), "(accepted)");
  EXPECT_EQ(message("0.5Ki"), "(accepted)");
}

TEST(SetJson, RoundTripsAndRejectsBadValues) {
  SetRequest r;
  r.alloc = "a";
  r.gpu = "0";
  r.memory_limit = parse_memory_limit_arg("25%");
  r.weight = 3;
  r.mode = shm::ComputeMode::kCapped;
  const SetRequest back = set_request_from_json(to_json(r));
  EXPECT_EQ(to_json(back), to_json(r));
  EXPECT_THROW(set_request_from_json({{"alloc", "a"}}), InvalidRequest);
  EXPECT_THROW(set_request_from_json({{"alloc", "a"}, {"compute_limit_pct", 0}}), InvalidRequest);
  EXPECT_THROW(set_request_from_json({{"alloc", "a"}, {"weight", "x"}}), InvalidRequest);
  EXPECT_THROW(set_request_from_json({{"alloc", "a"}, {"memory_limit_bytes", -5}}), InvalidRequest);
  EXPECT_THROW(set_request_from_json({{"alloc", "a"}, {"memory_limit_bytes", 0}}), InvalidRequest);
  EXPECT_THROW(set_request_from_json({{"alloc", "a"}, {"mode", "turbo"}}), InvalidRequest);
}

class ApplySet : public ::testing::Test {
 protected:
  void SetUp() override {
    regions_ = testing::make_regions("a", 0, shm::kCreatedByPlugin);
    testing::set_gpu(regions_, 0, testing::kUuid0, 8 * kGi, 50, 50, shm::ComputeMode::kCapped);
    testing::set_gpu(regions_, 1, testing::kUuid1, 8 * kGi, 50, 50, shm::ComputeMode::kCapped);
    testing::add_process(regions_, 0, 1, 0, 0, 6 * kGi, 0, 0);
  }
  SetRequest request(const std::string& memory) {
    SetRequest r;
    r.alloc = "a";
    r.memory_limit = parse_memory_limit_arg(memory);
    return r;
  }
  testing::RegionPair regions_;
};

TEST_F(ApplySet, EveryEntryByDefaultAndWarnsBelowUse) {
  const SetOutcome out =
      apply_set(*regions_.limits, regions_.usage.get(), request("4Gi"), testing::scenario_gpus());
  ASSERT_EQ(out.entries.size(), 2u);
  EXPECT_EQ(describe(out.entries[0]), std::string(testing::kUuid0) + ": memory 8Gi -> 4Gi");
  EXPECT_EQ(shm::read_gpu_limits(*regions_.limits, 1).memory_limit_bytes, 4 * kGi);
  ASSERT_EQ(out.warnings.size(), 1u);  // GPU 0 uses 6Gi
  EXPECT_NE(out.warnings[0].find("nothing is killed"), std::string::npos);
  EXPECT_EQ(regions_.limits->generation.load() % 2, 0u);
}

// `set -o json` prints figures, not the human lines: bytes as integers, null
// for no quota, and which fields changed; the socket carries the same.
TEST_F(ApplySet, OutcomeJsonIsStructuredAndRoundTrips) {
  SetRequest r = request("none");
  r.gpu = testing::kUuid1;
  r.mode = shm::ComputeMode::kBurst;
  const SetOutcome out =
      apply_set(*regions_.limits, regions_.usage.get(), r, testing::scenario_gpus());
  const nlohmann::json j = to_json(out);
  EXPECT_EQ(j.at("alloc"), "a");
  ASSERT_EQ(j.at("entries").size(), 1u);
  const nlohmann::json& e = j.at("entries")[0];
  EXPECT_EQ(e.at("uuid"), testing::kUuid1);
  EXPECT_EQ(e.at("before").at("memory_limit_bytes"), 8 * kGi);
  EXPECT_TRUE(e.at("after").at("memory_limit_bytes").is_null());
  EXPECT_EQ(e.at("before").at("mode"), "capped");
  EXPECT_EQ(e.at("after").at("mode"), "burst");
  EXPECT_EQ(e.at("after").at("compute_limit_pct"), 50);
  EXPECT_EQ(e.at("changed"), (nlohmann::json{"memory_limit_bytes", "mode"}));
  EXPECT_TRUE(j.at("warnings").empty());

  const SetOutcome back = set_outcome_from_json(j);
  EXPECT_EQ(to_json(back), j);
  EXPECT_EQ(describe(back.entries[0]),
            std::string(testing::kUuid1) + ": memory 8Gi -> none, mode capped -> burst");
  SetChange same{"*", {}, {}};
  EXPECT_EQ(describe(same), "*: unchanged");
}

TEST_F(ApplySet, SelectsByIndexAndResolvesPercent) {
  SetRequest r = request("25%");
  r.gpu = "1";
  r.compute_limit_pct = 20;
  apply_set(*regions_.limits, regions_.usage.get(), r, testing::scenario_gpus());
  EXPECT_EQ(shm::read_gpu_limits(*regions_.limits, 0).memory_limit_bytes, 8 * kGi);
  EXPECT_EQ(shm::read_gpu_limits(*regions_.limits, 1).memory_limit_bytes, 20 * kGi);  // 25% of 80Gi
  EXPECT_EQ(shm::read_gpu_limits(*regions_.limits, 1).compute_limit_pct, 20u);
}

TEST_F(ApplySet, PercentWithoutCardSizeChangesNothing) {
  SetRequest r = request("25%");
  r.weight = 9;
  EXPECT_THROW(apply_set(*regions_.limits, regions_.usage.get(), r, {}), InvalidRequest);
  EXPECT_EQ(shm::read_gpu_limits(*regions_.limits, 0).weight, 50u);
  EXPECT_EQ(regions_.limits->generation.load(), 0u);
}

TEST_F(ApplySet, UnknownGpuSelector) {
  SetRequest r = request("1Gi");
  r.gpu = "GPU-nope";
  EXPECT_THROW(apply_set(*regions_.limits, nullptr, r, testing::scenario_gpus()), InvalidRequest);
}

}  // namespace
}  // namespace cushare::tools
