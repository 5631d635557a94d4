// "Did you mean ...?" for a mistyped command name.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cushare::tools {

// Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The known name closest to `typed`, when it is close enough to be a typo
// (at most two edits, and fewer edits than half the word) or `typed` is the
// start of exactly one name; nullopt otherwise. Ties go to the earlier name.
std::optional<std::string> suggest_command(std::string_view typed,
                                           const std::vector<std::string>& known);

}  // namespace cushare::tools
