// Environment -> per-GPU quota spec: defaults, precedence, HAMi aliases, errors.
#include "shm/quota_spec.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace cushare::shm {
namespace {

constexpr std::uint64_t Mi = 1024ull * 1024, Gi = Mi * 1024;
const char* kUuid0 = "GPU-11111111-2222-3333-4444-555555555555";
const char* kUuid1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

std::vector<VisibleGpu> two_gpus() {
  return {{0, kUuid0, 80 * Gi}, {1, kUuid1, 40 * Gi}};
}

std::vector<GpuQuotaSpec> ok(const FakeEnv& env, const std::vector<VisibleGpu>& gpus = two_gpus()) {
  auto r = quota_spec_from_env(env.lookup(), gpus);
  EXPECT_TRUE(r.has_value()) << r.error();
  return r.has_value() ? *r : std::vector<GpuQuotaSpec>{};
}

std::string err(const FakeEnv& env, const std::vector<VisibleGpu>& gpus = two_gpus()) {
  auto r = quota_spec_from_env(env.lookup(), gpus);
  EXPECT_FALSE(r.has_value());
  return r.has_value() ? std::string() : r.error();
}

TEST(ShmQuotaSpec, DefaultsAreUnlimitedBurstFullCompute) {
  auto s = ok({});
  ASSERT_EQ(s.size(), 2u);
  for (const auto& g : s) {
    EXPECT_EQ(g.memory_limit_bytes, kUnlimited);
    EXPECT_EQ(g.compute_limit_pct, 100u);
    EXPECT_EQ(g.weight, 100u);
    EXPECT_EQ(g.mode, ComputeMode::kBurst);
    EXPECT_EQ(g.memory_source, "");
  }
  EXPECT_EQ(s[0].uuid, kUuid0);
  EXPECT_EQ(s[1].index, 1u);
}

TEST(ShmQuotaSpec, GlobalLimitAppliesToEveryGpu) {
  auto s = ok({{{"CUSHARE_MEMORY_LIMIT", "4Gi"}, {"CUSHARE_COMPUTE_LIMIT", "30"}}});
  EXPECT_EQ(s[0].memory_limit_bytes, 4 * Gi);
  EXPECT_EQ(s[1].memory_limit_bytes, 4 * Gi);
  EXPECT_EQ(s[0].compute_limit_pct, 30u);
  EXPECT_EQ(s[1].weight, 30u);  // weight defaults to the compute limit
  EXPECT_EQ(s[0].memory_source, "CUSHARE_MEMORY_LIMIT");
}

TEST(ShmQuotaSpec, PercentResolvesAgainstEachCard) {
  auto s = ok({{{"CUSHARE_MEMORY_LIMIT", "25%"}}});
  EXPECT_EQ(s[0].memory_limit_bytes, 20 * Gi);
  EXPECT_EQ(s[1].memory_limit_bytes, 10 * Gi);
}

TEST(ShmQuotaSpec, PrecedenceUuidOverIndexOverGlobal) {
  FakeEnv env{{{"CUSHARE_MEMORY_LIMIT", "1Gi"},
               {"CUSHARE_MEMORY_LIMIT_0", "2Gi"},
               {"CUSHARE_MEMORY_LIMIT_1", "3Gi"},
               {std::string("CUSHARE_MEMORY_LIMIT_") + kUuid0, "5Gi"}}};
  auto s = ok(env);
  EXPECT_EQ(s[0].memory_limit_bytes, 5 * Gi);
  EXPECT_EQ(s[0].memory_source, std::string("CUSHARE_MEMORY_LIMIT_") + kUuid0);
  EXPECT_EQ(s[1].memory_limit_bytes, 3 * Gi);
  EXPECT_EQ(s[1].memory_source, "CUSHARE_MEMORY_LIMIT_1");
}

TEST(ShmQuotaSpec, UuidMayBeSpelledWithUnderscores) {
  FakeEnv env{{{"CUSHARE_MEMORY_LIMIT_GPU_aaaaaaaa_bbbb_cccc_dddd_eeeeeeeeeeee", "7Gi"},
               {"CUSHARE_COMPUTE_LIMIT_GPU_aaaaaaaa_bbbb_cccc_dddd_eeeeeeeeeeee", "20%"}}};
  auto s = ok(env);
  EXPECT_EQ(s[0].memory_limit_bytes, kUnlimited);
  EXPECT_EQ(s[1].memory_limit_bytes, 7 * Gi);
  EXPECT_EQ(s[1].compute_limit_pct, 20u);
  EXPECT_EQ(s[0].compute_limit_pct, 100u);
}

TEST(ShmQuotaSpec, CushareBeatsHamiAlias) {
  FakeEnv env{{{"CUDA_DEVICE_MEMORY_LIMIT", "3000m"},
               {"CUDA_DEVICE_MEMORY_LIMIT_1", "1g"},
               {"CUSHARE_MEMORY_LIMIT_0", "1Gi"},
               {"CUDA_DEVICE_SM_LIMIT", "40"},
               {"CUSHARE_COMPUTE_LIMIT_1", "70"}}};
  auto s = ok(env);
  EXPECT_EQ(s[0].memory_limit_bytes, 1 * Gi);  // CUSHARE per-index beats HAMi global
  EXPECT_EQ(s[1].memory_limit_bytes, 1 * Gi);  // HAMi per-index beats HAMi global
  EXPECT_EQ(s[1].memory_source, "CUDA_DEVICE_MEMORY_LIMIT_1");
  EXPECT_EQ(s[0].compute_limit_pct, 40u);
  EXPECT_EQ(s[0].compute_source, "CUDA_DEVICE_SM_LIMIT");
  EXPECT_EQ(s[1].compute_limit_pct, 70u);

  FakeEnv global{{{"CUDA_DEVICE_MEMORY_LIMIT", "3000m"}, {"CUSHARE_MEMORY_LIMIT", "2Gi"}}};
  EXPECT_EQ(ok(global)[1].memory_limit_bytes, 2 * Gi);
}

TEST(ShmQuotaSpec, HamiAliasesAlone) {
  auto s = ok({{{"CUDA_DEVICE_MEMORY_LIMIT", "3000m"}, {"CUDA_DEVICE_SM_LIMIT_1", "25"}}});
  EXPECT_EQ(s[0].memory_limit_bytes, 3000 * Mi);
  EXPECT_EQ(s[1].memory_limit_bytes, 3000 * Mi);
  EXPECT_EQ(s[0].compute_limit_pct, 100u);
  EXPECT_EQ(s[1].compute_limit_pct, 25u);
  // HAMi's SM limit 0 means "no limit".
  EXPECT_EQ(ok({{{"CUDA_DEVICE_SM_LIMIT", "0"}}})[0].compute_limit_pct, 100u);
}

TEST(ShmQuotaSpec, WeightAndMode) {
  auto s = ok({{{"CUSHARE_COMPUTE_LIMIT", "50"},
                {"CUSHARE_COMPUTE_WEIGHT", "7"},
                {"CUSHARE_COMPUTE_WEIGHT_1", "9"},
                {"CUSHARE_COMPUTE_MODE", "capped"}}});
  EXPECT_EQ(s[0].weight, 7u);
  EXPECT_EQ(s[1].weight, 9u);
  EXPECT_EQ(s[0].mode, ComputeMode::kCapped);
  EXPECT_EQ(ok({{{"CUSHARE_COMPUTE_MODE", "burst"}}})[0].mode, ComputeMode::kBurst);
}

TEST(ShmQuotaSpec, ErrorsNameVariableAndValue) {
  struct Case {
    const char* var;
    const char* value;
  };
  const std::vector<Case> cases = {
      {"CUSHARE_MEMORY_LIMIT", ""},         {"CUSHARE_MEMORY_LIMIT", "-1Gi"},
      {"CUSHARE_MEMORY_LIMIT", "4GB"},      {"CUSHARE_MEMORY_LIMIT", "99999999999Ei"},
      {"CUSHARE_MEMORY_LIMIT", "50%%"},     {"CUSHARE_MEMORY_LIMIT", "0%"},
      {"CUSHARE_MEMORY_LIMIT", "150%"},     {"CUSHARE_MEMORY_LIMIT", " 4Gi"},
      {"CUSHARE_MEMORY_LIMIT", "0"},        {"CUSHARE_MEMORY_LIMIT_1", "lots"},
      {"CUDA_DEVICE_MEMORY_LIMIT", "1.5g"}, {"CUDA_DEVICE_MEMORY_LIMIT_0", "0"},
      {"CUSHARE_COMPUTE_LIMIT", "0"},       {"CUSHARE_COMPUTE_LIMIT", "101"},
      {"CUSHARE_COMPUTE_LIMIT_0", "50%%"},  {"CUDA_DEVICE_SM_LIMIT", "101"},
      {"CUDA_DEVICE_SM_LIMIT_1", "-3"},     {"CUSHARE_COMPUTE_WEIGHT", "0"},
      {"CUSHARE_COMPUTE_WEIGHT", "10001"},  {"CUSHARE_COMPUTE_MODE", "fast"},
      {"CUSHARE_COMPUTE_MODE", ""},
  };
  for (const auto& c : cases) {
    const std::string e = err({{{c.var, c.value}}});
    EXPECT_NE(e.find(std::string(c.var) + "='" + c.value + "'"), std::string::npos)
        << c.var << "=" << c.value << " -> " << e;
  }
}

TEST(ShmQuotaSpec, ShadowedMalformedVariableStillFails) {
  // A typo in a less specific variable is an error even if a more specific
  // one decides the value: nothing malformed is ever silently ignored.
  const std::string e = err({{{"CUSHARE_MEMORY_LIMIT", "4 Gi"},
                              {"CUSHARE_MEMORY_LIMIT_0", "1Gi"},
                              {"CUSHARE_MEMORY_LIMIT_1", "1Gi"}}});
  EXPECT_NE(e.find("CUSHARE_MEMORY_LIMIT='4 Gi'"), std::string::npos) << e;
  EXPECT_FALSE(
      quota_spec_from_env(
          FakeEnv{{{"CUSHARE_MEMORY_LIMIT", "1Gi"}, {"CUDA_DEVICE_MEMORY_LIMIT", "junk"}}}.lookup(),
          two_gpus())
          .has_value());
}

TEST(ShmQuotaSpec, PercentNeedsKnownCardSize) {
  std::vector<VisibleGpu> unknown = {{0, kUuid0, 0}};
  const std::string e = err({{{"CUSHARE_MEMORY_LIMIT", "10%"}}}, unknown);
  EXPECT_NE(e.find("CUSHARE_MEMORY_LIMIT='10%'"), std::string::npos) << e;
  EXPECT_EQ(ok({{{"CUSHARE_MEMORY_LIMIT", "1Gi"}}}, unknown)[0].memory_limit_bytes, Gi);
}

TEST(ShmQuotaSpec, SeventeenGpusIsAnError) {
  std::vector<VisibleGpu> gpus;
  for (unsigned i = 0; i < 17; ++i) gpus.push_back({i, "GPU-" + std::to_string(i), Gi});
  const std::string e = err({}, gpus);
  EXPECT_NE(e.find("17 GPUs"), std::string::npos) << e;
  gpus.pop_back();
  EXPECT_EQ(ok({}, gpus).size(), 16u);
  EXPECT_EQ(ok({}, {}).size(), 0u);
}

}  // namespace
}  // namespace cushare::shm
