#include "scheduler/process_verifier.hpp"

#include <spdlog/spdlog.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace cushare::sched {
namespace {

std::optional<std::uint64_t> dec(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// The next space-separated field of `line`, removed from it.
std::string_view field(std::string_view& line) {
  const auto start = line.find_first_not_of(' ');
  if (start == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(start);
  const auto end = std::min(line.find(' '), line.size());
  const std::string_view f = line.substr(0, end);
  line.remove_prefix(end);
  return f;
}

}  // namespace

bool maps_inode(std::string_view text, std::uint64_t ino) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t eol = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    // address perms offset dev inode [path]
    for (int skip = 0; skip < 4; ++skip) field(line);
    if (dec(field(line)) == ino) return true;
  }
  return false;
}

std::map<unsigned, SlotVerdict> AllocationProcesses::refresh(shm::UsageRegion& usage,
                                                             std::uint64_t dev, std::uint64_t ino,
                                                             Host& host, std::uint64_t now_ns) {
  std::map<unsigned, SlotVerdict> out;
  for (unsigned i = 0; i < shm::kMaxSlots; ++i) {
    auto& slot = usage.slots[i];
    if (shm::slot_state(slot) != shm::SlotState::kActive) {
      verified_.erase(i);
      pending_.erase(i);
      continue;
    }
    shm::SlotIdentity id = shm::read_identity(slot);
    id.host_pid = 0;
    if (auto it = verified_.find(i); it != verified_.end()) {
      const auto st = host.stat(it->second.host_pid);
      if (it->second.identity == id && st && st->state != 'Z' && st->state != 'X' &&
          st->start_time == it->second.start_time) {
        slot.host_pid.store(it->second.host_pid, std::memory_order_release);
        continue;
      }
      verified_.erase(it);  // its process is gone or the slot has another owner now
    }
    slot.host_pid.store(0, std::memory_order_release);
    if (auto p = pending_.find(i);
        p != pending_.end() && p->second.identity == id && now_ns < p->second.retry_ns) {
      out[i] = SlotVerdict::kUnverified;
      continue;
    }
    pending_.erase(i);
    auto unverified = [&] {
      out[i] = SlotVerdict::kUnverified;
      pending_[i] = Pending{id, now_ns + kRetryNs};
    };
    if (id.pid == 0) {
      unverified();
      continue;
    }
    const HostPidTable& table = host.table();
    const auto host_pid = table.find({id.pidns_inode, id.pid, id.start_time});
    if (!host_pid) {
      // Its namespace is visible but the process is not: it is dead (or the
      // identity is made up). An unseen namespace may belong to a process the
      // daemon cannot see: not judged.
      if (table.sees_namespace(id.pidns_inode)) {
        out[i] = SlotVerdict::kDead;
      } else {
        unverified();
      }
      continue;
    }
    const auto st = host.stat(*host_pid);
    if (!st || st->state == 'Z' || st->state == 'X' || st->start_time != id.start_time) {
      out[i] = SlotVerdict::kDead;  // it was in the table, and has died since
      continue;
    }
    const auto mapped = host.maps_file(*host_pid, dev, ino);
    if (mapped && !*mapped) {
      // A live process with that identity that does not map this usage file:
      // the slot borrows another process's identity, or its shim is gone (it
      // exec'd a program without CUDA). Not a process of the allocation; its
      // slot is reclaimed once that process is gone.
      unverified();
      continue;
    }
    if (!mapped && !warned_unreadable_) {
      warned_unreadable_ = true;
      spdlog::warn(
          "cannot read /proc/{}/maps: processes are verified by their identity only (run "
          "cushared as root so that a slot must also map its allocation's usage file)",
          *host_pid);
    }
    verified_[i] = VerifiedProcess{*host_pid, id.start_time, id};
    slot.host_pid.store(*host_pid, std::memory_order_release);
  }
  return out;
}

const HostPidTable& ProcHost::table() {
  if (!table_) table_ = HostPidTable::scan(proc_root_);
  return *table_;
}

std::optional<shm::ProcStat> ProcHost::stat(std::uint32_t host_pid) {
  return shm::read_proc_stat(static_cast<pid_t>(host_pid), proc_root_);
}

std::optional<bool> ProcHost::maps_file(std::uint32_t host_pid, std::uint64_t dev,
                                        std::uint64_t ino) {
  std::ifstream in(proc_root_ + "/" + std::to_string(host_pid) + "/maps");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::nullopt;
  (void)dev;  // see maps_inode
  return maps_inode(text.str(), ino);
}

}  // namespace cushare::sched
