#include "scheduler/host_pids.hpp"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "shm/proc_identity.hpp"

namespace cushare::sched {

std::optional<std::uint32_t> innermost_nspid(std::string_view text) {
  constexpr std::string_view kTag = "NSpid:";
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t eol = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.starts_with(kTag)) continue;
    line.remove_prefix(kTag.size());
    std::optional<std::uint32_t> last;
    while (!line.empty()) {
      const std::size_t start = line.find_first_not_of(" \t");
      if (start == std::string_view::npos) break;
      line.remove_prefix(start);
      std::uint32_t v = 0;
      auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
      if (ec != std::errc{}) return std::nullopt;
      last = v;
      line.remove_prefix(static_cast<std::size_t>(ptr - line.data()));
    }
    return last;
  }
  return std::nullopt;
}

HostPidTable HostPidTable::scan(const std::string& proc_root) {
  HostPidTable table;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(proc_root, ec)) {
    const std::string name = entry.path().filename().string();
    std::uint32_t pid = 0;
    auto [ptr, perr] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (perr != std::errc{} || ptr != name.data() + name.size()) continue;
    std::ifstream status(entry.path() / "status");
    if (!status) continue;
    std::stringstream text;
    text << status.rdbuf();
    const auto ns_pid = innermost_nspid(text.str());
    const auto inode = shm::read_pidns_inode(static_cast<pid_t>(pid), proc_root);
    const auto stat = shm::read_proc_stat(static_cast<pid_t>(pid), proc_root);
    if (!ns_pid || !inode || !stat) continue;  // gone meanwhile, or not ours to read
    table.add({*inode, *ns_pid, stat->start_time}, pid);
  }
  return table;
}

std::optional<std::uint32_t> HostPidTable::find(const ProcessKey& key) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

}  // namespace cushare::sched
