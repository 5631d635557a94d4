// The allocations of a run dir: the folders <run-dir>/alloc/<id>/ holding a
// `limits` and a `usage` region. Discovered through inotify as they appear
// and go (whoever made them: the device plugin, a standalone shim, a test),
// with a full rescan every second as a safety net for missed events.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shm/region_file.hpp"

namespace cushare::sched {

struct Allocation {
  std::string id;  // folder name
  std::filesystem::path dir;
  shm::LimitsMapping limits;  // read-write: the daemon writes lease words
  // Read-write: host PIDs, reclaim, overhead. The allocation's processes can
  // write, resize or replace the file: while it is not a valid region of the
  // limits' owner it is not mapped, and the allocation gets no GPU time.
  std::optional<shm::UsageMapping> usage;

  shm::UsageRegion* usage_region() { return usage ? &usage->mutable_region() : nullptr; }
};

class AllocationRegistry {
 public:
  explicit AllocationRegistry(const std::filesystem::path& run_dir);
  ~AllocationRegistry();
  AllocationRegistry(const AllocationRegistry&) = delete;
  AllocationRegistry& operator=(const AllocationRegistry&) = delete;

  struct Changes {
    std::vector<std::string> added;
    std::vector<std::string> removed;     // already unmapped
    std::vector<std::string> usage_lost;  // still registered, usage unmapped
  };
  // Non-blocking: drains pending inotify events and rescans when something
  // happened or the periodic rescan is due. `events_may_wait`: false when the
  // caller's poll() just found notify_fd() unreadable, which saves a read()
  // per tick.
  Changes poll(std::uint64_t now_ns, bool events_may_wait = true);

  // Readable when inotify has events (for the daemon's poll()).
  int notify_fd() const { return notify_fd_; }
  // Before this time an event cannot make a rescan (they are at least
  // kMinRescanGapNs apart): the daemon leaves notify_fd() out of its poll
  // until then. A tenant that writes to a file of its folder without pause
  // makes an event per write, and the daemon would wake for each.
  std::uint64_t events_heeded_from() const;
  std::map<std::string, std::unique_ptr<Allocation>>& allocations() { return allocations_; }
  const std::filesystem::path& alloc_root() const { return alloc_root_; }

 private:
  Changes rescan();
  bool any_damaged() const;
  bool drain_events();
  // Drops a usage mapping that no longer is the valid file at its path, and
  // maps the file when it is valid again. True when it was dropped now.
  // `discovering`: the folder was seen for the first time, and its creator
  // may still be publishing the file; a failure then is retried at the next
  // rescan without a log line, so that it does not hold back (rate-limit)
  // the line of a real problem that follows.
  bool refresh_usage(Allocation& a, bool discovering = false);
  void note_problem(const std::string& id, const std::string& what);

  std::filesystem::path alloc_root_;
  int notify_fd_ = -1;
  std::map<std::string, int> folder_watches_;
  std::map<std::string, std::unique_ptr<Allocation>> allocations_;
  struct Problem {
    std::string what;             // the last one
    std::uint64_t logged_ns = 0;  // when a line was last written
    unsigned suppressed = 0;
  };
  std::map<std::string, Problem> problems_;  // by folder
  std::uint64_t now_ns_ = 0;
  std::uint64_t next_rescan_ns_ = 0;
  std::uint64_t last_rescan_ns_ = 0;
  bool events_pending_ = false;
};

}  // namespace cushare::sched
