#include "tests/fakegpu/core/pid_view.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <atomic>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/fakegpu/core/state_file.hpp"

namespace fakegpu {
namespace {

uint64_t pidns_of(const std::string& proc_entry) {
  struct stat sb {};
  if (::stat((proc_entry + "/ns/pid").c_str(), &sb) != 0) return 0;
  return static_cast<uint64_t>(sb.st_ino);
}

// The innermost PID of a /proc/<p>/status "NSpid:" line.
std::optional<int32_t> innermost_nspid(const std::string& proc_entry) {
  std::ifstream in(proc_entry + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    int32_t pid = 0, last = 0;
    bool any = false;
    while (fields >> pid) {
      last = pid;
      any = true;
    }
    return any ? std::optional<int32_t>(last) : std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

uint64_t own_pidns() {
  static const uint64_t ns = pidns_of("/proc/self");
  return ns;
}

std::optional<int32_t> visible_pid(const ProcSlot& slot) {
  if (slot.pidns == 0 || slot.pidns == own_pidns()) return slot.pid;
  if (slot.view_pidns == own_pidns() && slot.view_pid > 0) return slot.view_pid;
  return std::nullopt;
}

std::optional<bool> process_gone(const ProcSlot& slot) {
  auto pid = visible_pid(slot);
  if (!pid) return std::nullopt;
  return process_start_ticks(*pid) != slot.start_ticks;
}

void see_foreign(StateFile& file) {
  using Key = std::tuple<uint64_t, int32_t, uint64_t>;  // pidns, pid there, start ticks
  std::map<Key, int32_t> wanted;
  {
    StateLock lock(file);
    for (const ProcSlot& p : lock.state().procs) {
      if (p.state == SlotState::live && !visible_pid(p))
        wanted[{p.pidns, p.pid, p.start_ticks}] = 0;
    }
  }
  if (wanted.empty()) return;
  // A slot of a namespace this view never sees would otherwise cost a scan
  // per call (fakegpu-stat is polled every few ms by tests).
  static std::atomic<uint64_t> last_scan_ns{0};
  const uint64_t now = monotonic_ns();
  const uint64_t last = last_scan_ns.load(std::memory_order_relaxed);
  if (last != 0 && now - last < 50'000'000) return;
  last_scan_ns.store(now, std::memory_order_relaxed);
  std::map<uint64_t, bool> namespaces;
  for (const auto& [key, pid] : wanted) namespaces[std::get<0>(key)] = true;
  DIR* dir = ::opendir("/proc");
  if (!dir) return;
  while (dirent* e = ::readdir(dir)) {
    int32_t pid = 0;
    const char* end = e->d_name + std::char_traits<char>::length(e->d_name);
    auto [ptr, ec] = std::from_chars(e->d_name, end, pid);
    if (ec != std::errc{} || ptr != end) continue;
    const std::string entry = std::string("/proc/") + e->d_name;
    const uint64_t ns = pidns_of(entry);
    if (!namespaces.contains(ns)) continue;  // cheap: one stat per process
    const auto inner = innermost_nspid(entry);
    if (!inner) continue;
    auto it = wanted.find({ns, *inner, process_start_ticks(pid)});
    if (it != wanted.end()) it->second = pid;
  }
  ::closedir(dir);
  StateLock lock(file);
  for (ProcSlot& p : lock.state().procs) {
    if (p.state != SlotState::live || visible_pid(p)) continue;
    auto it = wanted.find({p.pidns, p.pid, p.start_ticks});
    if (it == wanted.end() || it->second == 0) continue;
    p.view_pidns = own_pidns();
    p.view_pid = it->second;
  }
}

}  // namespace fakegpu
