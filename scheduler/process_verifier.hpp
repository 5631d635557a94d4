// The processes of an allocation as the daemon has verified them itself.
//
// Tenants write their `usage` region, so nothing read from it proves that a
// process exists: a slot's identity, its host_pid and the allocation's demand
// can all be forged. A slot counts as a live process of the allocation only
// once the daemon found a host process with the slot's identity (PID
// namespace, PID in it, start time) that maps this allocation's `usage` file
// (every shim of the allocation maps it before it claims a slot). The record
// is the daemon's own and survives whatever the tenant writes, until the host
// process is gone or the slot changes owner.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "scheduler/host_pids.hpp"
#include "shm/layout.hpp"
#include "shm/process_slots.hpp"

namespace cushare::sched {

// Whether /proc/<pid>/maps text maps a file with this inode number. The
// device column is not compared: it is the superblock's, which btrfs
// subvolumes and overlayfs report differently from stat(2); with the slot's
// identity already matched, an inode of another filesystem is no risk.
bool maps_inode(std::string_view maps_text, std::uint64_t ino);

struct VerifiedProcess {
  std::uint32_t host_pid = 0;
  std::uint64_t start_time = 0;  // clock ticks after boot, as /proc says
  shm::SlotIdentity identity;    // the slot's identity when it was verified (host_pid 0)
};

// How one slot was judged in a pass.
enum class SlotVerdict {
  kVerified,    // a live host process of this allocation
  kDead,        // its process is gone, or it is not a process of this allocation
  kUnverified,  // cannot tell yet (its namespace is not visible, /proc unreadable)
};

class AllocationProcesses {
 public:
  // Reads the host side of the machine; replaced in tests.
  struct Host {
    virtual ~Host() = default;
    virtual const HostPidTable& table() = 0;  // scanned at most once per pass, on first use
    virtual std::optional<shm::ProcStat> stat(std::uint32_t host_pid) = 0;
    // nullopt when the maps cannot be read (not permitted, gone).
    virtual std::optional<bool> maps_file(std::uint32_t host_pid, std::uint64_t dev,
                                          std::uint64_t ino) = 0;
  };

  // Judges every active slot of `usage` (whose file is `dev`/`ino`): verified
  // records are kept while their process lives and the slot keeps its
  // identity; other slots are verified through `host`, each identity that
  // could not be judged at most once per kRetryNs (a tenant can fill its
  // region with made-up slots; they must not make the daemon scan /proc on
  // every pass). Writes each slot's host_pid (0 unless verified) for the
  // readers of the region. Returns, for every active slot that is not
  // verified, its verdict.
  std::map<unsigned, SlotVerdict> refresh(shm::UsageRegion& usage, std::uint64_t dev,
                                          std::uint64_t ino, Host& host, std::uint64_t now_ns);
  static constexpr std::uint64_t kRetryNs = 1'000'000'000;

  unsigned live() const { return static_cast<unsigned>(verified_.size()); }
  const std::map<unsigned, VerifiedProcess>& verified() const { return verified_; }
  void forget(unsigned slot) { verified_.erase(slot); }

 private:
  std::map<unsigned, VerifiedProcess> verified_;
  struct Pending {
    shm::SlotIdentity identity;
    std::uint64_t retry_ns = 0;
  };
  std::map<unsigned, Pending> pending_;  // judged kUnverified, not to be retried before retry_ns
  bool warned_unreadable_ = false;
};

// The machine's /proc, for AllocationProcesses.
class ProcHost : public AllocationProcesses::Host {
 public:
  explicit ProcHost(std::string proc_root) : proc_root_(std::move(proc_root)) {}
  const HostPidTable& table() override;
  std::optional<shm::ProcStat> stat(std::uint32_t host_pid) override;
  std::optional<bool> maps_file(std::uint32_t host_pid, std::uint64_t dev,
                                std::uint64_t ino) override;
  bool scanned() const { return table_.has_value(); }

 private:
  std::string proc_root_;
  std::optional<HostPidTable> table_;
};

}  // namespace cushare::sched
