#include "shim/accounting/managed_allocation.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <charconv>
#include <vector>

#include "shm/run_dir_layout.hpp"

namespace cushare::shim {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view s) {
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && octal(s[i + 1]) && octal(s[i + 2]) && octal(s[i + 3])) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < line.size()) {
    const auto start = line.find_first_not_of(' ', pos);
    if (start == std::string_view::npos) break;
    const auto end = std::min(line.find(' ', start), line.size());
    out.push_back(line.substr(start, end - start));
    pos = end;
  }
  return out;
}

template <class T>
bool number(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

bool has_option(std::string_view options, std::string_view want) {
  std::size_t pos = 0;
  while (pos <= options.size()) {
    const auto end = std::min(options.find(',', pos), options.size());
    if (options.substr(pos, end - pos) == want) return true;
    pos = end + 1;
  }
  return false;
}

// `path` without its last component when that is `name` ("<head>/<name>" ->
// "<head>"); nullopt otherwise.
std::optional<std::string_view> parent_if_named(std::string_view path, std::string_view name) {
  if (path.size() <= name.size() || !path.ends_with(name)) return std::nullopt;
  const std::string_view head = path.substr(0, path.size() - name.size());
  if (!head.ends_with('/')) return std::nullopt;
  return head.substr(0, head.size() - 1);
}

// "<anything>/alloc/<id>/limits" -> id
std::optional<std::string> alloc_id_of_root(std::string_view root) {
  const auto folder = parent_if_named(root, shm::kLimitsName);
  if (!folder) return std::nullopt;
  const auto slash = folder->rfind('/');
  if (slash == std::string_view::npos || slash + 1 >= folder->size()) return std::nullopt;
  const std::string_view id = folder->substr(slash + 1);
  if (!parent_if_named(folder->substr(0, slash), shm::kAllocDirName)) return std::nullopt;
  return std::string(id);
}

}  // namespace

std::optional<ManagedMount> find_managed_mount(std::string_view mountinfo) {
  std::optional<ManagedMount> found;
  std::size_t pos = 0;
  while (pos < mountinfo.size()) {
    const std::size_t eol = std::min(mountinfo.find('\n', pos), mountinfo.size());
    const std::string_view line = mountinfo.substr(pos, eol - pos);
    pos = eol + 1;
    // id parent major:minor root mount-point options [optional...] - type source super
    const auto f = split(line);
    if (f.size() < 6) continue;
    ManagedMount m;
    const auto colon = f[2].find(':');
    if (!number(f[0], m.mount_id) || colon == std::string_view::npos ||
        !number(f[2].substr(0, colon), m.dev_major) || !number(f[2].substr(colon + 1), m.dev_minor))
      continue;
    if (!has_option(f[5], "ro")) continue;
    const std::string root = unescape(f[3]);
    m.limits = unescape(f[4]);
    const auto run_dir = parent_if_named(m.limits, shm::kLimitsName);
    if (!run_dir || run_dir->empty()) continue;  // "/limits": no folder to be the allocation
    auto id = alloc_id_of_root(root);
    if (!id) continue;
    m.alloc_id = *id;
    m.run_dir = std::string(*run_dir);
    found = std::move(m);
  }
  return found;
}

const std::optional<ManagedMount>& managed_allocation() {
  static const std::optional<ManagedMount> mount = [] {
    std::optional<ManagedMount> out;
    const int fd = ::open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return out;
    std::string text;
    char buf[8192];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return find_managed_mount(text);
  }();
  return mount;
}

std::optional<std::string> verify_managed_limits(int fd, const ManagedMount& mount) {
  struct statvfs vfs {};
  if (::fstatvfs(fd, &vfs) != 0) return "cannot statvfs it";
  if (!(vfs.f_flag & ST_RDONLY)) return "it is not on a read-only mount";
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) == 0 && (stx.stx_mask & STATX_MNT_ID)) {
    if (stx.stx_mnt_id != mount.mount_id)
      return "it is on mount " + std::to_string(stx.stx_mnt_id) + ", not the limits mount " +
             std::to_string(mount.mount_id);
    return std::nullopt;
  }
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) return "cannot stat it";
  if (major(sb.st_dev) != mount.dev_major || minor(sb.st_dev) != mount.dev_minor)
    return "it is not on the device of the limits mount";
  return std::nullopt;
}

}  // namespace cushare::shim
