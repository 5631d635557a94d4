#include "shim/devices/visible_devices.hpp"

#include <algorithm>
#include <optional>
#include <string_view>

namespace cushare::shim {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::optional<unsigned> find_entry(std::string_view entry, std::span<const std::string> uuids) {
  if (!entry.empty() && entry.size() <= 4 &&
      std::all_of(entry.begin(), entry.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    unsigned index = 0;
    for (char c : entry) index = index * 10 + static_cast<unsigned>(c - '0');
    if (index < uuids.size()) return index;
    return std::nullopt;
  }
  if (!entry.starts_with("GPU-") || entry.size() == 4) return std::nullopt;
  std::optional<unsigned> match;
  for (unsigned i = 0; i < uuids.size(); ++i) {
    if (!std::string_view(uuids[i]).starts_with(entry)) continue;
    if (match) return std::nullopt;  // ambiguous prefix
    match = i;
  }
  return match;
}

}  // namespace

std::vector<unsigned> cuda_visible_order(const char* value, std::span<const std::string> uuids) {
  std::vector<unsigned> out;
  if (value == nullptr) {
    for (unsigned i = 0; i < uuids.size(); ++i) out.push_back(i);
    return out;
  }
  std::string_view rest(value);
  for (;;) {
    const std::size_t comma = rest.find(',');
    const auto index = find_entry(trim(rest.substr(0, comma)), uuids);
    if (!index || std::find(out.begin(), out.end(), *index) != out.end()) break;
    out.push_back(*index);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace cushare::shim
