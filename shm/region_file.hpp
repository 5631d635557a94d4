// Mapping of the `limits` and `usage` region files. Creation is exclusive and
// publishes the header magic last; opening validates before anything else is
// touched. Every failure is a RegionError naming the path.
//
// A tenant controls the files of its allocation folder, and node processes
// (daemon, device plugin, cusharectl) open them as root: a file is opened once,
// without following a symbolic link and without blocking on a FIFO, checked on
// the opened descriptor (a regular file, its size) and mapped from that
// descriptor, so the path is never resolved again after the check.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "shm/layout.hpp"
#include "shm/region_error.hpp"
#include "shm/region_validate.hpp"

namespace cushare::shm {

enum class Access { kReadOnly, kReadWrite };

struct RegionCreateOptions {
  std::string alloc_id;     // copied into header.alloc_id (truncated to fit)
  std::uint32_t flags = 0;  // RegionFlags
};

// File modes: limits 0644 (only its writer may change quotas), usage 0666
// (every process of the allocation writes it, whatever its uid). Applied with
// fchmod, so the umask does not matter.
inline constexpr unsigned kLimitsFileMode = 0644;
inline constexpr unsigned kUsageFileMode = 0666;

// How long open_or_create waits for a racing creator to publish the magic.
inline constexpr std::chrono::milliseconds kDefaultPublishWait{2000};

template <class Region>
class RegionMapping {
 public:
  using Fill = std::function<void(Region&)>;

  // Creates the file exclusively (kExists when it is there), sizes it
  // (fallocate, so a full disk is an error here and not SIGBUS later), lets
  // `fill` initialise the zeroed region, then publishes header.magic with
  // release. On any failure the half-made file is removed.
  static RegionMapping create(const std::filesystem::path& path, const RegionCreateOptions& opts,
                              const Fill& fill = {});

  // Opens and validates an existing region. With `wait` > 0 a file that is
  // there but not yet published (a racing creator is still filling it) is
  // retried until it is or `wait` has passed; otherwise it is kBadMagic at once.
  static RegionMapping open(const std::filesystem::path& path, Access access,
                            std::chrono::milliseconds wait = std::chrono::milliseconds{0});

  // Standalone mode: exactly one of several racing processes creates the file
  // (created() == true), the others open it, waiting up to `wait` for the
  // creator to publish the magic; a file that stays unpublished longer is an
  // error (kBadMagic), as is any other invalid file.
  static RegionMapping open_or_create(const std::filesystem::path& path,
                                      const RegionCreateOptions& opts, const Fill& fill = {},
                                      std::chrono::milliseconds wait = kDefaultPublishWait);

  RegionMapping(RegionMapping&&) noexcept;
  RegionMapping& operator=(RegionMapping&&) noexcept;
  ~RegionMapping();

  const Region& region() const { return *region_; }
  // Throws RegionError(kIo) on a read-only mapping: writing it would SIGSEGV.
  Region& mutable_region();
  bool writable() const { return access_ == Access::kReadWrite; }
  bool created() const { return created_; }
  const std::filesystem::path& path() const { return path_; }
  // The file that is mapped, as fstat saw it when it was opened.
  struct FileIdentity {
    std::uint64_t dev = 0, ino = 0;
    std::uint32_t uid = 0;
    bool operator==(const FileIdentity&) const = default;
  };
  const FileIdentity& file() const { return file_; }
  // Whether `path` still names the mapped file (lstat: a symbolic link or a
  // replacement put there since is not it).
  bool still_at(const std::filesystem::path& path) const;
  // The file was truncated under this mapping and an access past its end was
  // caught by the mapping guard (shm/mapping_guard.hpp): the region is no
  // longer the file's content; drop it. Always false without the guard.
  bool damaged() const noexcept;

 private:
  struct Impl;
  RegionMapping(std::unique_ptr<Impl> impl, Region* region, Access access, bool created,
                std::filesystem::path path, FileIdentity file);
  std::unique_ptr<Impl> impl_;
  Region* region_ = nullptr;
  Access access_ = Access::kReadOnly;
  bool created_ = false;
  std::filesystem::path path_;
  FileIdentity file_;
};

using LimitsMapping = RegionMapping<LimitsRegion>;
using UsageMapping = RegionMapping<UsageRegion>;

extern template class RegionMapping<LimitsRegion>;
extern template class RegionMapping<UsageRegion>;

}  // namespace cushare::shm
