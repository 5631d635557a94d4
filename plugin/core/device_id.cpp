#include "plugin/core/device_id.hpp"

#include <charconv>

#include <fmt/format.h>

namespace cushare::plugin {

std::string format_device_id(std::string_view gpu_uuid, unsigned unit) {
  return fmt::format("{}{}{}", gpu_uuid, kIdSeparator, unit);
}

DeviceId parse_device_id(std::string_view id) {
  const auto sep = id.rfind(kIdSeparator);
  if (sep == std::string_view::npos || sep == 0) {
    throw DeviceIdError(fmt::format("malformed device ID '{}': expected '<GPU-UUID>::<unit>'", id));
  }
  const std::string_view uuid = id.substr(0, sep);
  const std::string_view unit_text = id.substr(sep + kIdSeparator.size());
  unsigned unit = 0;
  const auto [end, ec] =
      std::from_chars(unit_text.data(), unit_text.data() + unit_text.size(), unit);
  if (unit_text.empty() || ec != std::errc{} || end != unit_text.data() + unit_text.size()) {
    throw DeviceIdError(
        fmt::format("malformed device ID '{}': the unit after '::' must be a decimal number", id));
  }
  if (uuid.find(kIdSeparator) != std::string_view::npos) {
    throw DeviceIdError(fmt::format("malformed device ID '{}': more than one '::'", id));
  }
  return DeviceId{std::string(uuid), unit};
}

}  // namespace cushare::plugin
