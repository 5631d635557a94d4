#include "tools/output_format.hpp"

#include "tools/status_render.hpp"

namespace cushare::tools {

namespace {
// Wide enough that no id, name or path is ever cut, small enough that a
// renderer padding to the width stays cheap.
constexpr std::size_t kWideWidth = 4096;
}  // namespace

std::optional<OutputFormat> parse_output_format(std::string_view text) {
  if (text == "table") return OutputFormat::kTable;
  if (text == "wide") return OutputFormat::kWide;
  if (text == "json") return OutputFormat::kJson;
  return std::nullopt;
}

std::size_t table_width(OutputFormat format) {
  return format == OutputFormat::kWide ? kWideWidth : kDefaultWidth;
}

}  // namespace cushare::tools
