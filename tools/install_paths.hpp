// Where cushare's files are on a host (same defaults as the device plugin,
// plugin/core/plugin_config.hpp).
#pragma once

#include <optional>
#include <string>

namespace cushare::tools {

inline constexpr char kInstalledLibrary[] = "/usr/local/lib/cushare/libcushare.so";
inline constexpr char kContainerLibrary[] = "/usr/local/lib/cushare/libcushare.so";

// `explicit_path` if given; else the build tree's lib/libcushare.so next to
// this cusharectl's bin/ when present; else the installed path (which may not
// exist: callers report that).
std::string library_path(const std::optional<std::string>& explicit_path);

}  // namespace cushare::tools
