#include "scheduler/process_verifier.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <vector>

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

MapsAnswer scan_maps(const std::function<long(char*, std::size_t)>& read, std::uint64_t ino,
                     std::size_t max_bytes,
                     const std::function<bool(std::string_view range)>& confirm) {
  // address perms offset dev inode [path]: only the first fields matter, and
  // a line is kept up to kKeep characters whatever the path's length.
  constexpr std::size_t kKeep = 160;
  std::string line;
  line.reserve(kKeep);
  const auto matches = [&] {
    std::string_view rest = line;
    const std::string_view range = field(rest);
    for (int skip = 0; skip < 3; ++skip) field(rest);
    return dec(field(rest)) == ino && confirm(range);
  };
  std::vector<char> buf(64 * 1024);
  std::size_t total = 0;
  for (;;) {
    const long n = read(buf.data(), buf.size());
    if (n < 0) return MapsAnswer::kUnreadable;
    if (n == 0) break;
    for (long i = 0; i < n; ++i) {
      if (buf[static_cast<std::size_t>(i)] == '\n') {
        if (matches()) return MapsAnswer::kMaps;
        line.clear();
      } else if (line.size() < kKeep) {
        line.push_back(buf[static_cast<std::size_t>(i)]);
      }
    }
    total += static_cast<std::size_t>(n);
    if (total >= max_bytes) return MapsAnswer::kTooLong;
  }
  return !line.empty() && matches() ? MapsAnswer::kMaps : MapsAnswer::kDoesNotMap;
}

bool maps_inode(std::string_view text, std::uint64_t ino) {
  const auto read = [&](char* buf, std::size_t size) -> long {
    const std::size_t n = std::min(size, text.size());
    std::copy_n(text.data(), n, buf);
    text.remove_prefix(n);
    return static_cast<long>(n);
  };
  return scan_maps(read, ino, static_cast<std::size_t>(-1),
                   [](std::string_view) { return true; }) == MapsAnswer::kMaps;
}

std::map<unsigned, SlotVerdict> AllocationProcesses::refresh(shm::UsageRegion& usage,
                                                             std::uint64_t dev, std::uint64_t ino,
                                                             Host& host, std::uint64_t now_ns) {
  std::map<unsigned, SlotVerdict> out;
  // From the first slot the budget left unjudged last time: each is judged in
  // turn, not the lowest indices again and again.
  const unsigned from = judge_from_;
  judge_from_ = 0;
  bool short_of_budget = false;
  for (unsigned k = 0; k < shm::kMaxSlots; ++k) {
    const unsigned i = (from + k) % shm::kMaxSlots;
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
    if (!take_judgement(now_ns)) {
      out[i] = SlotVerdict::kUnverified;  // judged at a later pass, when the budget allows
      if (!short_of_budget) judge_from_ = i;
      short_of_budget = true;
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
    const MapsAnswer mapped = host.maps_file(*host_pid, dev, ino);
    if (mapped == MapsAnswer::kDoesNotMap || mapped == MapsAnswer::kTooLong) {
      // A live process with that identity that does not map this usage file:
      // the slot borrows another process's identity, or its shim is gone (it
      // exec'd a program without CUDA). Not a process of the allocation; its
      // slot is reclaimed once that process is gone. Maps too long to read
      // now are judged again later.
      unverified();
      continue;
    }
    if (mapped == MapsAnswer::kUnreadable && !warned_unreadable_) {
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

bool AllocationProcesses::take_judgement(std::uint64_t now_ns) {
  if (now_ns > judged_ns_) {
    judgements_ = std::min(kJudgementBurst, judgements_ + static_cast<double>(now_ns - judged_ns_) *
                                                              1e-9 * kJudgementsPerSecond);
    judged_ns_ = now_ns;
  }
  if (judgements_ < 1) return false;
  judgements_ -= 1;
  return true;
}

const HostPidTable& ProcHost::table() {
  if (!table_) table_ = HostPidTable::scan(proc_root_);
  return *table_;
}

std::optional<shm::ProcStat> ProcHost::stat(std::uint32_t host_pid) {
  return shm::read_proc_stat(static_cast<pid_t>(host_pid), proc_root_);
}

MapsAnswer ProcHost::maps_file(std::uint32_t host_pid, std::uint64_t dev, std::uint64_t ino) {
  const auto key = std::make_tuple(host_pid, dev, ino);
  if (auto it = answers_.find(key); it != answers_.end()) return it->second;
  const std::string dir = proc_root_ + "/" + std::to_string(host_pid);
  const int fd = ::open((dir + "/maps").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return answers_[key] = MapsAnswer::kUnreadable;
  const auto read_chunk = [&](char* buf, std::size_t size) -> long {
    ssize_t n;
    do {
      n = ::read(fd, buf, size);
    } while (n < 0 && errno == EINTR);
    return n;
  };
  // The mapping itself, whatever the maps text says: its file's device and
  // inode as stat(2) gives them, the same as the daemon's stat of the usage
  // file. Reading map_files needs CAP_SYS_ADMIN, or CAP_CHECKPOINT_RESTORE
  // since Linux 5.9 (the deployed daemon has them); without, the inode number
  // alone decides, as before. A tenant can map files of that number from
  // other filesystems tens of thousands of times: past kMaxConfirms lines
  // the process is not judged now.
  unsigned confirms = 0;
  const auto confirm = [&](std::string_view range) {
    if (++confirms > kMaxConfirms) return false;
    struct stat sb {};
    if (::stat((dir + "/map_files/" + map_files_name(range)).c_str(), &sb) == 0)
      return static_cast<std::uint64_t>(sb.st_dev) == dev &&
             static_cast<std::uint64_t>(sb.st_ino) == ino;
    if (errno != EPERM && errno != EACCES) return false;  // the mapping is gone
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      spdlog::warn(
          "cannot read /proc/{}/map_files: a process's mapping of its usage file is matched by "
          "inode number only (run cushared with CAP_SYS_ADMIN, or CAP_CHECKPOINT_RESTORE on "
          "Linux 5.9 and later, to compare the file itself)",
          host_pid);
    return true;
  };
  MapsAnswer answer = scan_maps(read_chunk, ino, kMaxMapsBytes, confirm);
  ::close(fd);
  if (answer == MapsAnswer::kDoesNotMap && confirms > kMaxConfirms) answer = MapsAnswer::kTooLong;
  return answers_[key] = answer;
}

std::string map_files_name(std::string_view range) {
  // maps prints each address with at least 8 digits; map_files names them
  // without leading zeros (and refuses names that have them).
  const auto bare = [](std::string_view hex) {
    const auto first = hex.find_first_not_of('0');
    return first == std::string_view::npos ? std::string_view("0") : hex.substr(first);
  };
  const auto dash = range.find('-');
  if (dash == std::string_view::npos) return std::string(range);
  return std::string(bare(range.substr(0, dash))) + "-" + std::string(bare(range.substr(dash + 1)));
}

}  // namespace cushare::sched
