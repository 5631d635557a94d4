// How cusharectl prints a result: a table that fits 80 columns, a table with
// nothing cut (long ids and names whole, for wide terminals and grep), or JSON.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace cushare::tools {

enum class OutputFormat { kTable, kWide, kJson };

// "table" | "wide" | "json"; nullopt for anything else.
std::optional<OutputFormat> parse_output_format(std::string_view text);

// The column budget tables are rendered into for `format`.
std::size_t table_width(OutputFormat format);

}  // namespace cushare::tools
