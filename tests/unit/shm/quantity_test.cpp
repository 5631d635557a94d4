// Table-driven tests of the pure parsers in shm/quantity.hpp.
#include "shm/quantity.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cushare::shm {
namespace {

constexpr std::uint64_t Ki = 1024, Mi = Ki * 1024, Gi = Mi * 1024;

struct Good {
  const char* text;
  std::uint64_t bytes;
};
struct Bad {
  const char* text;
  const char* error_contains;
};

TEST(ShmQuantity, K8sQuantitiesParse) {
  const std::vector<Good> cases = {
      {"0", 0},
      {"1", 1},
      {"1000", 1000},
      {"+5", 5},
      {"4Gi", 4 * Gi},
      {"512Mi", 512 * Mi},
      {"1Ki", Ki},
      {"1Ti", 1024 * Gi},
      {"1Pi", 1024ull * 1024 * Gi},
      {"1Ei", 1ull << 60},
      {"15Ei", 15ull << 60},
      {"1.5Gi", 3 * Gi / 2},
      {"0.5Ki", 512},
      {".5Ki", 512},
      {"8G", 8000000000ull},
      {"1k", 1000},
      {"2M", 2000000},
      {"3T", 3000000000000ull},
      {"1P", 1000000000000000ull},
      {"1E", 1000000000000000000ull},
      {"1e9", 1000000000ull},
      {"1E9", 1000000000ull},
      {"2e+3", 2000},
      {"1.5e3", 1500},
      {"15e-1", 2},  // 1.5 bytes rounds up, as Kubernetes does
      {"0.1", 1},
      {"1.0001Ki", 1025},
      {"007", 7},
      {"18446744073709551614", 18446744073709551614ull},
  };
  for (const auto& c : cases) {
    auto r = parse_k8s_quantity(c.text);
    ASSERT_TRUE(r.has_value()) << c.text << ": " << r.error();
    EXPECT_EQ(*r, c.bytes) << c.text;
  }
}

TEST(ShmQuantity, K8sQuantitiesRejectMalformed) {
  const std::vector<Bad> cases = {
      {"", "empty"},
      {"-1", "negative"},
      {"-4Gi", "negative"},
      {" 4Gi", "whitespace"},
      {"4Gi ", "whitespace"},
      {"4 Gi", "whitespace"},
      {"4Gi\n", "whitespace"},
      {"4\tGi", "whitespace"},
      {"4GB", "unknown suffix"},
      {"4gi", "unknown suffix"},
      {"4g", "unknown suffix"},
      {"4Gib", "unknown suffix"},
      {"4K", "unknown suffix"},
      {"4Gi4", "unknown suffix"},
      {"3000m", "did you mean 'Mi'"},
      {"Gi", "does not start with a number"},
      {"abc", "does not start with a number"},
      {".", "does not start with a number"},
      {"%", "does not start with a number"},
      {"1..5", "unknown suffix"},
      {"1e", "malformed exponent"},
      {"1e+", "malformed exponent"},
      {"1e1000", "malformed exponent"},
      {"1ex", "malformed exponent"},
      {"18446744073709551615", "out of range"},  // == kUnlimited
      {"18446744073709551616", "out of range"},
      {"16Ei", "out of range"},
      {"1e20", "out of range"},
      {"99999999999999999999999999999999999999999Gi", "out of range"},
      {"1e100", "out of range"},
      {"--1", "negative"},
      {"+-1", "does not start with a number"},
  };
  for (const auto& c : cases) {
    auto r = parse_k8s_quantity(c.text);
    ASSERT_FALSE(r.has_value()) << "'" << c.text << "' parsed as " << *r;
    EXPECT_NE(r.error().find(c.error_contains), std::string::npos) << c.text << " -> " << r.error();
    if (*c.text) {
      EXPECT_NE(r.error().find(std::string("'") + c.text + "'"), std::string::npos)
          << "error must quote the value: " << r.error();
    }
  }
}

TEST(ShmQuantity, PercentParses) {
  const std::vector<std::pair<const char*, std::uint32_t>> cases = {
      {"25%", 25000},   {"100%", 100000},   {"1%", 1000},  {"0.5%", 500},
      {"12.5%", 12500}, {"33.333%", 33333}, {"0.001%", 1}, {"050%", 50000},
  };
  for (const auto& [text, milli] : cases) {
    auto r = parse_percent_milli(text);
    ASSERT_TRUE(r.has_value()) << text << ": " << r.error();
    EXPECT_EQ(*r, milli) << text;
  }
}

TEST(ShmQuantity, PercentRejectsMalformed) {
  const std::vector<Bad> cases = {
      {"", "empty"},
      {"%", "no number"},
      {"50%%", "one '%'"},
      {"0%", "above 0%"},
      {"0.0%", "above 0%"},
      {"101%", "above 100%"},
      {"100.001%", "above 100%"},
      {"50", "does not end"},
      {" 50%", "one '%'"},
      {"50 %", "one '%'"},
      {"-5%", "one '%'"},
      {"1.2345%", "three decimals"},
      {"%50", "does not end"},
      {"1e2%", "one '%'"},
      {"99999999999999999%", "above 100%"},
  };
  for (const auto& c : cases) {
    auto r = parse_percent_milli(c.text);
    ASSERT_FALSE(r.has_value()) << c.text;
    EXPECT_NE(r.error().find(c.error_contains), std::string::npos) << c.text << " -> " << r.error();
  }
}

TEST(ShmQuantity, MemoryAmountIsQuantityOrPercent) {
  auto q = parse_memory_amount("4Gi");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->kind, MemoryAmount::Kind::kBytes);
  EXPECT_EQ(resolve_memory_amount(*q, 80 * Gi), 4 * Gi);

  auto p = parse_memory_amount("25%");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->kind, MemoryAmount::Kind::kPercentOfCard);
  EXPECT_EQ(resolve_memory_amount(*p, 80 * Gi), 20 * Gi);
  EXPECT_EQ(resolve_memory_amount(*parse_memory_amount("100%"), 81559 * Mi), 81559 * Mi);
  EXPECT_EQ(resolve_memory_amount(*parse_memory_amount("33.333%"), 1000000), 333330u);

  EXPECT_FALSE(parse_memory_amount("50%%").has_value());
  EXPECT_FALSE(parse_memory_amount("4Gi%").has_value());
  EXPECT_FALSE(parse_memory_amount("").has_value());
}

TEST(ShmQuantity, HamiUnits) {
  const std::vector<Good> good = {
      {"3000m", 3000 * Mi}, {"3000M", 3000 * Mi}, {"2g", 2 * Gi},  {"2G", 2 * Gi},
      {"64k", 64 * Ki},     {"64K", 64 * Ki},     {"1048576", Mi}, {"0", 0},
  };
  for (const auto& c : good) {
    auto r = parse_hami_memory(c.text);
    ASSERT_TRUE(r.has_value()) << c.text << ": " << r.error();
    EXPECT_EQ(*r, c.bytes) << c.text;
  }
  const std::vector<Bad> bad = {
      {"", "empty"},
      {"m", "no number"},
      {"-1m", "negative"},
      {"1.5g", "not an integer"},
      {"1Gi", "not an integer"},
      {"1t", "not an integer"},
      {" 1g", "not an integer"},
      {"1g ", "not an integer"},
      {"18446744073709551615", "out of range"},
      {"17179869184g", "out of range"},
      {"99999999999999999999999", "out of range"},
  };
  for (const auto& c : bad) {
    auto r = parse_hami_memory(c.text);
    ASSERT_FALSE(r.has_value()) << c.text;
    EXPECT_NE(r.error().find(c.error_contains), std::string::npos) << c.text << " -> " << r.error();
  }
}

TEST(ShmQuantity, ComputePercent) {
  EXPECT_EQ(*parse_compute_percent("50"), 50u);
  EXPECT_EQ(*parse_compute_percent("50%"), 50u);
  EXPECT_EQ(*parse_compute_percent("1"), 1u);
  EXPECT_EQ(*parse_compute_percent("100"), 100u);
  for (const char* bad :
       {"", "0", "0%", "101", "50%%", "%", "-5", " 5", "5 ", "2.5", "abc", "1e2"}) {
    auto r = parse_compute_percent(bad);
    EXPECT_FALSE(r.has_value()) << bad;
    if (!r) {
      EXPECT_NE(r.error().find(std::string("'") + bad + "'"), std::string::npos);
    }
  }
}

TEST(ShmQuantity, UintInRange) {
  EXPECT_EQ(*parse_uint_in_range("7", 1, 10), 7u);
  EXPECT_EQ(*parse_uint_in_range("0010", 1, 10), 10u);
  EXPECT_FALSE(parse_uint_in_range("11", 1, 10).has_value());
  EXPECT_FALSE(parse_uint_in_range("0", 1, 10).has_value());
  EXPECT_FALSE(parse_uint_in_range("+1", 1, 10).has_value());
  EXPECT_FALSE(parse_uint_in_range("99999999999999999999999999", 1, 10).has_value());
}

}  // namespace
}  // namespace cushare::shm
