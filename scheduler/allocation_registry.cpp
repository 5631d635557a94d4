#include "scheduler/allocation_registry.hpp"

#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <set>

#include "shm/run_dir_layout.hpp"

namespace cushare::sched {
namespace fs = std::filesystem;

namespace {
constexpr std::uint64_t kRescanIntervalNs = 1'000'000'000;
constexpr std::uint64_t kMinRescanGapNs = 10'000'000;
constexpr std::uint64_t kProblemLogGapNs = 10'000'000'000;
constexpr std::uint32_t kRootMask =
    IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR;
// IN_MODIFY: truncate(2) of a region file (writes through mappings raise no event).
constexpr std::uint32_t kFolderMask =
    IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_MODIFY;
}  // namespace

AllocationRegistry::AllocationRegistry(const fs::path& run_dir)
    : alloc_root_(run_dir / shm::kAllocDirName) {
  std::error_code ec;
  fs::create_directories(alloc_root_, ec);
  if (ec) throw std::runtime_error("cannot create " + alloc_root_.string() + ": " + ec.message());
  // Only node processes go through alloc/ (shm/run_dir_layout.hpp).
  struct stat sb {};
  if (::stat(alloc_root_.c_str(), &sb) == 0 && sb.st_uid == ::geteuid())
    ::chmod(alloc_root_.c_str(), shm::kAllocRootMode);
  notify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (notify_fd_ < 0 || inotify_add_watch(notify_fd_, alloc_root_.c_str(), kRootMask) < 0) {
    spdlog::warn("inotify unavailable on {}; discovering allocations by rescans only",
                 alloc_root_.string());
  }
}

AllocationRegistry::~AllocationRegistry() {
  if (notify_fd_ >= 0) close(notify_fd_);
}

bool AllocationRegistry::drain_events() {
  if (notify_fd_ < 0) return false;
  bool any = false;
  alignas(inotify_event) std::array<char, 8192> buf;
  for (;;) {
    const ssize_t n = read(notify_fd_, buf.data(), buf.size());
    if (n <= 0) break;
    any = true;
  }
  return any;
}

bool AllocationRegistry::any_damaged() const {
  for (const auto& [id, a] : allocations_)
    if (a->limits.damaged() || (a->usage && a->usage->damaged())) return true;
  return false;
}

std::uint64_t AllocationRegistry::events_heeded_from() const {
  return last_rescan_ns_ + kMinRescanGapNs;
}

AllocationRegistry::Changes AllocationRegistry::poll(std::uint64_t now_ns, bool events_may_wait) {
  now_ns_ = now_ns;
  if (events_may_wait) events_pending_ = drain_events() || events_pending_;
  if (!events_pending_ && now_ns < next_rescan_ns_ && !any_damaged()) return {};
  // A tenant can make events as fast as it can truncate its own usage file:
  // they never make the daemon rescan more than every kMinRescanGapNs (the
  // events are kept for the next rescan).
  if (now_ns < next_rescan_ns_ && now_ns - last_rescan_ns_ < kMinRescanGapNs) return {};
  events_pending_ = false;
  next_rescan_ns_ = now_ns + kRescanIntervalNs;
  last_rescan_ns_ = now_ns;
  return rescan();
}

void AllocationRegistry::note_problem(const std::string& id, const std::string& what) {
  // Said once, retried at each rescan; a tenant that keeps changing its file
  // gets a line per kProblemLogGapNs, not one per rescan.
  Problem& p = problems_[id];
  if (p.what == what) return;
  p.what = what;
  if (p.logged_ns && now_ns_ - p.logged_ns < kProblemLogGapNs) {
    ++p.suppressed;
    return;
  }
  if (p.suppressed) {
    spdlog::warn("allocation {}: {} ({} other problems in the last {} s)", id, what, p.suppressed,
                 kProblemLogGapNs / 1'000'000'000);
  } else {
    spdlog::warn("allocation {}: {}", id, what);
  }
  p.logged_ns = now_ns_;
  p.suppressed = 0;
}

bool AllocationRegistry::refresh_usage(Allocation& a, bool discovering) {
  const fs::path path = a.dir / shm::kUsageName;
  if (a.usage) {
    struct stat sb {};
    const bool same = a.usage->still_at(path) && ::lstat(path.c_str(), &sb) == 0 &&
                      static_cast<std::uint64_t>(sb.st_size) == sizeof(shm::UsageRegion);
    if (same && !a.usage->damaged()) return false;
    a.usage.reset();
    const std::string what =
        "its usage region was truncated, resized or replaced under the daemon (its own "
        "processes can do that): it gets no GPU time until the file is a valid region again";
    note_problem(a.id, what);
    return true;
  }
  try {
    auto usage = shm::UsageMapping::open(path, shm::Access::kReadWrite);
    // Whoever made the allocation made both files: a usage file of another
    // owner was put there by someone else.
    if (usage.file().uid != a.limits.file().uid) {
      note_problem(a.id, fmt::format("{} is owned by uid {}, its limits by uid {}: not used",
                                     path.string(), usage.file().uid, a.limits.file().uid));
      return false;
    }
    a.usage.emplace(std::move(usage));
    if (auto p = problems_.find(a.id); p != problems_.end() && !p->second.what.empty()) {
      p->second.what.clear();
      if (now_ns_ - p->second.logged_ns >= kProblemLogGapNs) {
        spdlog::info("allocation {}: usage region valid again", a.id);
        p->second.logged_ns = now_ns_;
      } else {
        ++p->second.suppressed;
      }
    }
  } catch (const std::exception& e) {
    if (discovering) {
      spdlog::debug("allocation {}: {} (retried at the next rescan)", a.id, e.what());
    } else {
      note_problem(a.id, e.what());
    }
  }
  return false;
}

AllocationRegistry::Changes AllocationRegistry::rescan() {
  Changes changes;
  std::set<std::string> present;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(alloc_root_, ec)) {
    // Only real folders: a symbolic link in alloc/ is never an allocation.
    if (!entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    const std::string id = entry.path().filename().string();
    present.insert(id);
    if (notify_fd_ >= 0 && !folder_watches_.contains(id)) {
      // Watch the folder so its region files are picked up as soon as written.
      folder_watches_[id] = inotify_add_watch(notify_fd_, entry.path().c_str(), kFolderMask);
    }
    if (auto it = allocations_.find(id); it != allocations_.end()) {
      if (refresh_usage(*it->second)) changes.usage_lost.push_back(id);
      continue;
    }
    const fs::path limits = entry.path() / shm::kLimitsName;
    const fs::path usage = entry.path() / shm::kUsageName;
    if (!fs::exists(usage, ec) && !fs::is_symlink(usage, ec)) continue;  // not complete yet
    try {
      auto a = std::make_unique<Allocation>(Allocation{
          .id = id,
          .dir = entry.path(),
          .limits = shm::LimitsMapping::open(limits, shm::Access::kReadWrite),
          .usage = std::nullopt,
      });
      problems_.erase(id);
      refresh_usage(*a, true);
      allocations_.emplace(id, std::move(a));
      changes.added.push_back(id);
      spdlog::info("allocation {} discovered", id);
    } catch (const std::exception& e) {
      // A creator may still be publishing; say so once, retry at each rescan.
      note_problem(id, std::string("not usable yet: ") + e.what());
    }
  }
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    const Allocation& a = *it->second;
    // limits is the daemon's and its writer's (read-only in the container):
    // when it is gone or replaced, so is the allocation.
    const bool gone = !present.contains(it->first) ||
                      !a.limits.still_at(a.dir / shm::kLimitsName) || a.limits.damaged();
    if (gone) {
      spdlog::info("allocation {} removed", it->first);
      changes.removed.push_back(it->first);
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = folder_watches_.begin(); it != folder_watches_.end();) {
    if (!present.contains(it->first)) {
      if (it->second >= 0) inotify_rm_watch(notify_fd_, it->second);
      problems_.erase(it->first);
      it = folder_watches_.erase(it);
    } else {
      ++it;
    }
  }
  return changes;
}

}  // namespace cushare::sched
