#include "node/format.hpp"

#include <array>
#include <cinttypes>
#include <cstdio>
#include <ctime>

namespace cushare::tools {

namespace {

std::string printf_string(const char* fmt, auto... args) {
  std::array<char, 64> buf{};
  std::snprintf(buf.data(), buf.size(), fmt, args...);
  return buf.data();
}

}  // namespace

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 7> kUnits{"B", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  if (bytes < 1024) return printf_string("%" PRIu64 "B", bytes);
  std::size_t unit = 0;
  std::uint64_t divisor = 1;
  while (unit + 1 < kUnits.size() && bytes / divisor >= 1024) {
    divisor *= 1024;
    ++unit;
  }
  // Exact multiples print without a fraction so a quota reads as it was set ("8Gi").
  if (bytes % divisor == 0) return printf_string("%" PRIu64 "%s", bytes / divisor, kUnits[unit]);
  const double value = static_cast<double>(bytes) / static_cast<double>(divisor);
  if (value < 10.0) return printf_string("%.1f%s", value, kUnits[unit]);
  return printf_string("%.0f%s", value, kUnits[unit]);
}

std::string format_quota(std::optional<std::uint64_t> bytes) {
  return bytes ? format_bytes(*bytes) : std::string("none");
}

std::string format_duration_ns(std::uint64_t ns) {
  constexpr std::uint64_t kMs = 1'000'000, kS = 1'000'000'000;
  if (ns == 0) return "0s";
  if (ns < kMs) return printf_string("%" PRIu64 "us", ns / 1000);
  if (ns < kS) return printf_string("%" PRIu64 "ms", ns / kMs);
  if (ns < 60 * kS)
    return printf_string("%.1fs", static_cast<double>(ns) / static_cast<double>(kS));
  const std::uint64_t s = ns / kS;
  if (s < 3600) return printf_string("%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
  if (s < 100 * 3600) return printf_string("%" PRIu64 "h%02" PRIu64 "m", s / 3600, (s / 60) % 60);
  return printf_string("%" PRIu64 "d%02" PRIu64 "h", s / 86400, (s / 3600) % 24);
}

std::string format_ppm(std::optional<std::uint32_t> ppm) {
  if (!ppm) return "-";
  if (*ppm >= 1'000'000) return "100%";
  return printf_string("%.1f%%", static_cast<double>(*ppm) / 10'000.0);
}

std::string format_unix_time(std::uint64_t unix_ns) {
  if (unix_ns == 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::array<char, 32> buf{};
  std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf.data();
}

}  // namespace cushare::tools
