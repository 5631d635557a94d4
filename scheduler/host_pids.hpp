// Maps the container PIDs recorded in process slots to host PIDs. A slot
// records (pid in its own namespace, PID-namespace inode, start time); the
// daemon, in the host PID namespace, finds the host process whose
// /proc/<p>/ns/pid inode is that namespace, whose innermost NSpid entry is
// that pid and whose start time matches (so a reused PID never matches).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

namespace cushare::sched {

// The innermost (last) PID of the "NSpid:" line of /proc/<p>/status text;
// nullopt when there is no such line.
std::optional<std::uint32_t> innermost_nspid(std::string_view status_text);

struct ProcessKey {
  std::uint64_t pidns_inode = 0;
  std::uint32_t ns_pid = 0;
  std::uint64_t start_time = 0;
  // clang-tidy 14 takes the defaulted comparison's 0 for a null pointer.
  // NOLINTNEXTLINE(modernize-use-nullptr)
  auto operator<=>(const ProcessKey&) const = default;
};

// Snapshot of every process visible in `proc_root`, keyed by what slots record.
class HostPidTable {
 public:
  static HostPidTable scan(const std::string& proc_root = "/proc");
  void add(const ProcessKey& key, std::uint32_t host_pid) {
    by_key_[key] = host_pid;
    namespaces_.insert(key.pidns_inode);
  }
  std::optional<std::uint32_t> find(const ProcessKey& key) const;
  // Whether any process of this PID namespace is visible here: if so, a
  // slot of that namespace whose process is not in the table is dead.
  bool sees_namespace(std::uint64_t pidns_inode) const { return namespaces_.contains(pidns_inode); }
  std::size_t size() const { return by_key_.size(); }

 private:
  std::map<ProcessKey, std::uint32_t> by_key_;
  std::set<std::uint64_t> namespaces_;
};

}  // namespace cushare::sched
