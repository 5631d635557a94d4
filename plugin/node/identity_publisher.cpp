#include "plugin/node/identity_publisher.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "plugin/core/pod_identity_sync.hpp"
#include "plugin/node/pod_resources_client.hpp"

namespace cushare::plugin {
namespace fs = std::filesystem;
namespace {

// Only the node writes this folder, but a stray link or huge file in it
// (an operator's mistake) is skipped rather than followed or read whole.
std::map<std::string, std::string> read_folder(const fs::path& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto name = entry.path().filename().string();
    if (name.starts_with(".")) continue;
    const int fd = ::open(entry.path().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      out[name] = "";  // unreadable: rewritten or removed
      continue;
    }
    struct stat st {};
    std::string content;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<std::size_t>(st.st_size) <= shm::kMaxIdentityFileBytes) {
      content.resize(static_cast<std::size_t>(st.st_size));
      const auto n = ::read(fd, content.data(), content.size());
      content.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    }
    ::close(fd);
    out[name] = std::move(content);
  }
  return out;
}

// Written beside the target and renamed over it: the daemon never reads half.
void write_file(const fs::path& dir, const std::string& name, const std::string& content) {
  const fs::path tmp = dir / ("." + name + ".tmp");
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        shm::kIdentityFileMode);
  if (fd < 0) throw std::runtime_error(fmt::format("{}: {}", tmp.string(), std::strerror(errno)));
  const bool ok =
      ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
      ::fchmod(fd, shm::kIdentityFileMode) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), (dir / name).c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("{}: {}", (dir / name).string(), std::strerror(errno)));
  }
}

}  // namespace

bool IdentityPublisher::run_once() {
  const auto containers = list_pod_resources(config_);
  if (!containers) return false;
  const fs::path dir = fs::path(config_.run_dir) / shm::kIdentityDirName;
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms(shm::kIdentityDirMode));
  const auto sync = plan_identity_sync(read_folder(dir), identities_by_allocation(*containers));
  for (const auto& name : sync.removals) fs::remove(dir / name);
  for (const auto& [name, content] : sync.writes) {
    write_file(dir, name, content);
    spdlog::debug("pod identity of allocation {}: {}", name, content.substr(0, content.size() - 1));
  }
  return true;
}

}  // namespace cushare::plugin
