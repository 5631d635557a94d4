#include <gtest/gtest.h>

#include "node/format.hpp"
#include "tools/status_render.hpp"
#include "tools/table.hpp"

namespace cushare::tools {
namespace {

TEST(FormatBytes, BinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0B");
  EXPECT_EQ(format_bytes(512), "512B");
  EXPECT_EQ(format_bytes(1536), "1.5Ki");
  EXPECT_EQ(format_bytes(8ull << 30), "8Gi");
  EXPECT_EQ(format_bytes(3435973837ull), "3.2Gi");
  EXPECT_EQ(format_bytes(300ull << 20), "300Mi");
  EXPECT_EQ(format_bytes((300ull << 20) + 1), "300Mi");
  EXPECT_EQ(format_bytes(UINT64_MAX), "16Ei");
  EXPECT_EQ(format_quota(std::nullopt), "none");
}

TEST(FormatDuration, Scales) {
  EXPECT_EQ(format_duration_ns(0), "0s");
  EXPECT_EQ(format_duration_ns(42'000), "42us");
  EXPECT_EQ(format_duration_ns(850'000'000), "850ms");
  EXPECT_EQ(format_duration_ns(12'300'000'000), "12.3s");
  EXPECT_EQ(format_duration_ns(303'000'000'000), "5m03s");
  EXPECT_EQ(format_duration_ns(7'500'000'000'000), "2h05m");
}

TEST(FormatPpm, Percent) {
  EXPECT_EQ(format_ppm(std::nullopt), "-");
  EXPECT_EQ(format_ppm(333'333), "33.3%");
  EXPECT_EQ(format_ppm(1'000'000), "100%");
  EXPECT_EQ(format_ppm(0), "0.0%");
}

TEST(FormatTime, Utc) {
  EXPECT_EQ(format_unix_time(1'700'000'000'000'000'000ull), "2023-11-14T22:13:20Z");
}

TEST(Table, FitsWidthByShrinkingFlexibleColumns) {
  Table t({{"NAME", Align::kLeft, true, 4}, {"SIZE", Align::kRight}});
  t.add_row({"a-very-long-allocation-name", "8Gi"});
  t.add_row({"b", "512Mi"});
  EXPECT_EQ(t.render(80),
            "NAME                          SIZE\n"
            "a-very-long-allocation-name    8Gi\n"
            "b                            512Mi\n");
  EXPECT_EQ(t.render(16),
            "NAME        SIZE\n"
            "a-very-l~    8Gi\n"
            "b          512Mi\n");
}

TEST(Wrap, BreaksAtSpacesAndIndentsContinuations) {
  EXPECT_EQ(wrap("one two three four", 9, 2), "one two\n  three\n  four\n");
  EXPECT_EQ(wrap("short", 80, 4), "short\n");
  EXPECT_EQ(wrap("averyveryverylongword x", 8, 2), "averyveryverylongword\n  x\n");
}

TEST(ShareBar, MarksEntitlementAndAchieved) {
  EXPECT_EQ(share_bar(500'000, 500'000, 12), "[#####|....]");
  EXPECT_EQ(share_bar(250'000, 500'000, 12), "[###..|....]");
  EXPECT_EQ(share_bar(std::nullopt, std::nullopt, 7), "[.....]");
  EXPECT_EQ(share_bar(1'000'000, 1'000'000, 6), "[###|]");
}

}  // namespace
}  // namespace cushare::tools

namespace cushare::tools {
namespace {
TEST(Wrap, KeepsLeadingIndent) {
  EXPECT_EQ(wrap("  folder  /a/b", 80, 4), "  folder /a/b\n");
}
}  // namespace
}  // namespace cushare::tools
