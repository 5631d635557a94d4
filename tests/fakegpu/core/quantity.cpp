#include "tests/fakegpu/core/quantity.hpp"

#include <array>
#include <cmath>
#include <utility>

namespace fakegpu {

std::optional<uint64_t> parse_uint(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

std::optional<uint64_t> parse_quantity(std::string_view text) {
  size_t digits_end = 0;
  bool seen_dot = false;
  while (digits_end < text.size() && ((text[digits_end] >= '0' && text[digits_end] <= '9') ||
                                      (text[digits_end] == '.' && !seen_dot))) {
    seen_dot |= text[digits_end] == '.';
    ++digits_end;
  }
  std::string_view number = text.substr(0, digits_end);
  std::string_view suffix = text.substr(digits_end);
  if (number.empty() || number == "." || number.front() == '.' || number.back() == '.')
    return std::nullopt;

  static constexpr std::array<std::pair<std::string_view, long double>, 13> kSuffixes{{
      {"", 1.0L},
      {"Ki", 1024.0L},
      {"Mi", 1048576.0L},
      {"Gi", 1073741824.0L},
      {"Ti", 1099511627776.0L},
      {"Pi", 1125899906842624.0L},
      {"Ei", 1152921504606846976.0L},
      {"k", 1e3L},
      {"M", 1e6L},
      {"G", 1e9L},
      {"T", 1e12L},
      {"P", 1e15L},
      {"E", 1e18L},
  }};
  long double multiplier = -1;
  for (const auto& [name, factor] : kSuffixes) {
    if (suffix == name) multiplier = factor;
  }
  if (multiplier < 0) return std::nullopt;

  long double whole = 0, scale = 1;
  bool fraction = false;
  for (char c : number) {
    if (c == '.') {
      fraction = true;
      continue;
    }
    whole = whole * 10 + (c - '0');
    if (fraction) scale *= 10;
  }
  long double bytes = whole / scale * multiplier;
  if (bytes > 9.2e18L) return std::nullopt;
  // A byte count must be whole: "1.5" is an error, "1.5Ki" is 1536.
  if (bytes != std::floor(bytes)) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

}  // namespace fakegpu
