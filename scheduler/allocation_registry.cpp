#include "scheduler/allocation_registry.hpp"

#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <array>
#include <set>

namespace cushare::sched {
namespace fs = std::filesystem;

namespace {
constexpr std::uint64_t kRescanIntervalNs = 1'000'000'000;
constexpr std::uint32_t kRootMask =
    IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR;
// IN_MODIFY: truncate(2) of a region file (writes through mappings raise no event).
constexpr std::uint32_t kFolderMask =
    IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_MODIFY;
}  // namespace

AllocationRegistry::AllocationRegistry(fs::path run_dir)
    : alloc_root_(std::move(run_dir) / "alloc") {
  std::error_code ec;
  fs::create_directories(alloc_root_, ec);
  if (ec) throw std::runtime_error("cannot create " + alloc_root_.string() + ": " + ec.message());
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
    if (a->limits.damaged() || a->usage.damaged()) return true;
  return false;
}

AllocationRegistry::Changes AllocationRegistry::poll(std::uint64_t now_ns) {
  const bool events = drain_events();
  if (!events && now_ns < next_rescan_ns_ && !any_damaged()) return {};
  next_rescan_ns_ = now_ns + kRescanIntervalNs;
  return rescan();
}

AllocationRegistry::Changes AllocationRegistry::rescan() {
  Changes changes;
  std::set<std::string> present;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(alloc_root_, ec)) {
    if (!entry.is_directory(ec)) continue;
    const std::string id = entry.path().filename().string();
    present.insert(id);
    if (notify_fd_ >= 0 && !folder_watches_.contains(id)) {
      // Watch the folder so its region files are picked up as soon as written.
      folder_watches_[id] = inotify_add_watch(notify_fd_, entry.path().c_str(), kFolderMask);
    }
    if (allocations_.contains(id)) continue;
    const fs::path limits = entry.path() / "limits";
    const fs::path usage = entry.path() / "usage";
    if (!fs::exists(limits, ec) || !fs::exists(usage, ec)) continue;  // not complete yet
    try {
      auto a = std::make_unique<Allocation>(Allocation{
          .id = id,
          .dir = entry.path(),
          .limits = shm::LimitsMapping::open(limits, shm::Access::kReadWrite),
          .usage = shm::UsageMapping::open(usage, shm::Access::kReadWrite),
      });
      allocations_.emplace(id, std::move(a));
      last_error_.erase(id);
      changes.added.push_back(id);
      spdlog::info("allocation {} discovered", id);
    } catch (const std::exception& e) {
      // A creator may still be publishing; say so once, retry at each rescan.
      if (last_error_[id] != e.what()) {
        spdlog::warn("allocation {} not usable yet: {}", id, e.what());
        last_error_[id] = e.what();
      }
    }
  }
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    std::error_code e2;
    const Allocation& a = *it->second;
    const bool gone = !present.contains(it->first) || !fs::exists(a.dir / "limits", e2);
    // A tenant may truncate its own region files (usage is writable by all of
    // its processes): the mapping guard turned the daemon's faults into zero
    // pages, or the size shows it first. The allocation is dropped until its
    // files are valid again.
    const bool truncated =
        !gone && (a.limits.damaged() || a.usage.damaged() ||
                  fs::file_size(a.dir / "usage", e2) != sizeof(shm::UsageRegion) ||
                  fs::file_size(a.dir / "limits", e2) != sizeof(shm::LimitsRegion));
    if (truncated) {
      spdlog::error(
          "allocation {}: a region file was truncated under the daemon (its own processes "
          "can do that); dropped until its files are valid again",
          it->first);
      last_error_[it->first] = "truncated";
      changes.removed.push_back(it->first);
      it = allocations_.erase(it);
    } else if (gone) {
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
      it = folder_watches_.erase(it);
    } else {
      ++it;
    }
  }
  return changes;
}

}  // namespace cushare::sched
