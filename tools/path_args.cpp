#include "tools/path_args.hpp"

namespace cushare::tools {

std::optional<std::string> check_absolute_dir(const std::string& path, const std::string& source) {
  if (path.empty()) return source + " is empty: give an absolute folder such as /var/run/cushare";
  if (path.front() != '/')
    return source + " '" + path + "' is a relative path: give an absolute folder";
  return std::nullopt;
}

std::optional<std::string> check_container_dir(const std::string& path, const std::string& source) {
  if (auto error = check_absolute_dir(path, source)) return error;
  if (path.find_first_of(":,") != std::string::npos)
    return source + " '" + path + "' contains ':' or ',', which docker -v cannot mount";
  return std::nullopt;
}

}  // namespace cushare::tools
