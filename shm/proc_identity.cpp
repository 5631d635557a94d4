#include "shm/proc_identity.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cushare::shm {
namespace {

bool parse_u64(std::string_view s, std::uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  unsigned __int128 v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v > UINT64_MAX) return false;
  out = static_cast<std::uint64_t>(v);
  return true;
}

// Whole small file with one read loop, no allocation beyond the buffer.
std::optional<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[1024];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > 64 * 1024) break;
  }
  ::close(fd);
  return out;
}

}  // namespace

Parsed<ProcStat> parse_proc_stat(std::string_view line) {
  using R = Parsed<ProcStat>;
  const auto close = line.rfind(')');
  if (close == std::string_view::npos || line.find('(') == std::string_view::npos ||
      line.find('(') > close)
    return R::fail("stat line has no '(comm)' field");
  std::string_view rest = line.substr(close + 1);
  // Fields after ')' start at field 3 (state).
  ProcStat st;
  int field = 2;
  std::size_t i = 0;
  while (i < rest.size()) {
    while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\n')) ++i;
    if (i >= rest.size()) break;
    std::size_t j = i;
    while (j < rest.size() && rest[j] != ' ' && rest[j] != '\n') ++j;
    ++field;
    const std::string_view tok = rest.substr(i, j - i);
    if (field == 3) {
      if (tok.size() != 1) return R::fail("stat line has a malformed state field");
      st.state = tok[0];
    } else if (field == 22) {
      if (!parse_u64(tok, st.start_time))
        return R::fail("stat line has a malformed starttime field");
      return R::ok(st);
    }
    i = j;
  }
  return R::fail("stat line has fewer than 22 fields");
}

std::optional<ProcStat> read_proc_stat(pid_t pid, const std::string& proc_root) {
  auto text = read_small_file(proc_root + "/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  auto st = parse_proc_stat(*text);
  if (!st) return std::nullopt;
  return *st;
}

std::optional<std::uint64_t> read_pidns_inode(pid_t pid, const std::string& proc_root) {
  struct stat sb {};
  const std::string path = proc_root + "/" + std::to_string(pid) + "/ns/pid";
  if (::stat(path.c_str(), &sb) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(sb.st_ino);
}

Parsed<ProcessIdentity> self_identity(const std::string& proc_root) {
  using R = Parsed<ProcessIdentity>;
  ProcessIdentity id;
  id.pid = static_cast<std::uint32_t>(::getpid());
  struct stat sb {};
  const std::string ns = proc_root + "/self/ns/pid";
  if (::stat(ns.c_str(), &sb) != 0)
    return R::fail("cannot stat " + ns + ": " + std::strerror(errno));
  id.pidns_inode = static_cast<std::uint64_t>(sb.st_ino);
  const std::string stat_path = proc_root + "/self/stat";
  auto text = read_small_file(stat_path);
  if (!text) return R::fail("cannot read " + stat_path + ": " + std::strerror(errno));
  auto st = parse_proc_stat(*text);
  if (!st) return R::fail(stat_path + ": " + st.error());
  id.start_time = st->start_time;
  return R::ok(id);
}

}  // namespace cushare::shm
