#include "node/pod_identity_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cushare::tools {
namespace {

bool node_owned(const struct stat& st, uid_t owner) {
  return (st.st_uid == owner || st.st_uid == 0) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

}  // namespace

std::optional<shm::PodIdentity> read_pod_identity(const std::filesystem::path& run_dir,
                                                  const std::string& alloc_id) {
  struct stat run_st {
  }, dir_st{}, st{};
  const auto dir = run_dir / shm::kIdentityDirName;
  if (::stat(run_dir.c_str(), &run_st) != 0) return std::nullopt;
  if (::lstat(dir.c_str(), &dir_st) != 0 || !S_ISDIR(dir_st.st_mode) ||
      !node_owned(dir_st, run_st.st_uid))
    return std::nullopt;
  // O_NONBLOCK: a FIFO planted there must not hang the reader.
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

}  // namespace cushare::tools
