// Reads the pod identity of an allocation (RUN/identity/<alloc-id>, written by
// the device plugin, shm/pod_identity.hpp) for metrics labels. Only a file
// the node wrote is believed: a regular file, not a link, owned by the owner
// of the run dir (or root), writable by nobody else, in a folder likewise;
// anything else reads as "no identity". Header-only so it needs no new
// translation unit in the daemon's library.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "shm/pod_identity.hpp"

namespace cushare::sched {

inline bool node_owned(const struct stat& st, uid_t owner) {
  return (st.st_uid == owner || st.st_uid == 0) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

inline std::optional<shm::PodIdentity> read_pod_identity(const std::filesystem::path& run_dir,
                                                         const std::string& alloc_id) {
  struct stat run_st {
  }, dir_st{}, st{};
  const auto dir = run_dir / shm::kIdentityDirName;
  if (::stat(run_dir.c_str(), &run_st) != 0) return std::nullopt;
  if (::lstat(dir.c_str(), &dir_st) != 0 || !S_ISDIR(dir_st.st_mode) ||
      !node_owned(dir_st, run_st.st_uid))
    return std::nullopt;
  const int fd = ::open((dir / alloc_id).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && node_owned(st, run_st.st_uid) &&
      static_cast<std::size_t>(st.st_size) <= shm::kMaxIdentityFileBytes) {
    text.resize(static_cast<std::size_t>(st.st_size));
    const auto n = ::read(fd, text.data(), text.size());
    text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  ::close(fd);
  return shm::parse_pod_identity(text);
}

}  // namespace cushare::sched
