// Checks on the folders users name on the command line. A relative or empty
// run dir would silently put allocations under whatever folder the command
// happened to run in, and a relative container path means nothing to
// `docker run -v`; both are refused, naming where the value came from.
#pragma once

#include <optional>
#include <string>

namespace cushare::tools {

// An error message when `path` is empty or not absolute, else nullopt.
// `source` names the input: "--run-dir", "CUSHARE_RUN_DIR", ...
std::optional<std::string> check_absolute_dir(const std::string& path, const std::string& source);

// As check_absolute_dir, and no ':' or ',' (docker's -v and --mount separators).
std::optional<std::string> check_container_dir(const std::string& path, const std::string& source);

}  // namespace cushare::tools
