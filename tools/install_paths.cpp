#include "tools/install_paths.hpp"

#include <filesystem>

namespace cushare::tools {

std::string library_path(const std::optional<std::string>& explicit_path) {
  if (explicit_path) return *explicit_path;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = exe.parent_path().parent_path() / "lib" / "libcushare.so";
    if (std::filesystem::exists(beside, ec)) return beside.string();
  }
  return kInstalledLibrary;
}

}  // namespace cushare::tools
