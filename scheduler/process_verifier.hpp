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
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "scheduler/host_pids.hpp"
#include "shm/layout.hpp"
#include "shm/process_slots.hpp"

namespace cushare::sched {

// Whether /proc/<pid>/maps text maps a file with this inode number. The
// device column is not compared: it is the superblock's, which btrfs
// subvolumes and overlayfs report differently from stat(2). The inode
// number alone is no proof either (a tenant can make files until one has
// the number of a file every CUDA process maps, and give its usage that
// one): ProcHost confirms a match through /proc/<pid>/map_files.
bool maps_inode(std::string_view maps_text, std::uint64_t ino);

// The name in /proc/<pid>/map_files of a maps line's address range: the
// same addresses without leading zeros ("00400000-00452000" is
// "400000-452000").
std::string map_files_name(std::string_view range);

// What reading a process's maps for one file found.
enum class MapsAnswer {
  kMaps,
  kDoesNotMap,
  kUnreadable,  // not permitted, or gone
  kTooLong,     // past the byte limit before a match: not judged now
};

// Reads maps text in chunks from `read` (bytes read, 0 at the end, negative
// on error) and stops at the first line whose inode is `ino` and whose
// address range ("start-end") `confirm` accepts, or once `max_bytes` were
// read. A tenant decides how long its processes' maps are (65 530 mappings of
// 4 KiB paths are about 270 MB of text): the daemon keeps at most a line's
// first fields and reads no further than the limit.
MapsAnswer scan_maps(const std::function<long(char*, std::size_t)>& read, std::uint64_t ino,
                     std::size_t max_bytes,
                     const std::function<bool(std::string_view range)>& confirm);

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
    virtual MapsAnswer maps_file(std::uint32_t host_pid, std::uint64_t dev, std::uint64_t ino) = 0;
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
  // New identities judged against the host's processes (each may scan /proc
  // and read maps): at most kJudgementBurst at once and kJudgementsPerSecond
  // after that, per allocation. A slot found dead is reclaimed at once and a
  // tenant can forge it again, with a new identity, every pass; past the
  // budget its slots wait unjudged (kUnverified) for the next pass with one.
  // A real allocation starting more processes than the burst has the rest
  // verified within a second or so.
  static constexpr double kJudgementsPerSecond = 16;
  static constexpr double kJudgementBurst = 32;

  unsigned live() const { return static_cast<unsigned>(verified_.size()); }
  const std::map<unsigned, VerifiedProcess>& verified() const { return verified_; }
  void forget(unsigned slot) { verified_.erase(slot); }
  // Forgets every record (the usage region is gone), not the judgement budget:
  // a tenant that damages and restores its region gets no new one by it.
  void reset() {
    verified_.clear();
    pending_.clear();
  }

 private:
  std::map<unsigned, VerifiedProcess> verified_;
  struct Pending {
    shm::SlotIdentity identity;
    std::uint64_t retry_ns = 0;
  };
  std::map<unsigned, Pending> pending_;  // judged kUnverified, not to be retried before retry_ns
  bool warned_unreadable_ = false;
  double judgements_ = kJudgementBurst;  // the budget's tokens
  std::uint64_t judged_ns_ = 0;          // when they were last counted
  unsigned judge_from_ = 0;              // the slot a pass starts judging at
  bool take_judgement(std::uint64_t now_ns);
};

// The machine's /proc, for AllocationProcesses.
class ProcHost : public AllocationProcesses::Host {
 public:
  explicit ProcHost(std::string proc_root) : proc_root_(std::move(proc_root)) {}
  const HostPidTable& table() override;
  std::optional<shm::ProcStat> stat(std::uint32_t host_pid) override;
  MapsAnswer maps_file(std::uint32_t host_pid, std::uint64_t dev, std::uint64_t ino) override;
  bool scanned() const { return table_.has_value(); }

  // The most maps text read for one process (a CUDA program's are a few
  // hundred KiB to a few MiB): past it the slot is left unjudged, retried
  // after AllocationProcesses::kRetryNs. With the judgement budget, a tenant
  // makes the daemon read at most this much per judgement.
  static constexpr std::size_t kMaxMapsBytes = 8u << 20;
  // The most lines with the usage file's inode number whose mapping is
  // looked at (a stat each) in one process's maps.
  static constexpr unsigned kMaxConfirms = 32;

 private:
  std::string proc_root_;
  std::optional<HostPidTable> table_;
  // Answers of this pass, by host PID and file: a tenant can give all of its
  // slots one identity, and each would read the same maps again.
  std::map<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t>, MapsAnswer> answers_;
};

}  // namespace cushare::sched
