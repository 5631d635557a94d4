#include "shm/region_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "shm/mapping_guard.hpp"

namespace cushare::shm {
namespace bip = boost::interprocess;

namespace {

template <class Region>
constexpr RegionKind kind_of() {
  return std::is_same_v<Region, LimitsRegion> ? RegionKind::kLimits : RegionKind::kUsage;
}

std::uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

[[noreturn]] void throw_errno(RegionErrorCode code, const std::string& path,
                              const std::string& what, int err) {
  throw RegionError(code, path, what + ": " + std::strerror(err));
}

// One validated-or-not attempt at opening; never throws for invalid content
// so open_or_create can tell "not yet published" from "broken".
struct OpenAttempt {
  std::optional<bip::mapped_region> region;
  std::optional<ValidationFailure> failure;
  bool unpublished = false;  // zero-length / magic 0: a creator may still be at work
};

template <class Region>
OpenAttempt try_open(const std::string& path, Access access) {
  OpenAttempt out;
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) {
    if (errno == ENOENT) throw RegionError(RegionErrorCode::kMissing, path, "no such file");
    throw_errno(RegionErrorCode::kIo, path, "cannot stat", errno);
  }
  if (!S_ISREG(sb.st_mode)) throw RegionError(RegionErrorCode::kIo, path, "not a regular file");
  const auto file_size = static_cast<std::uint64_t>(sb.st_size);
  HeaderFields h;
  if (file_size >= sizeof(RegionHeader)) {
    const auto mode = access == Access::kReadWrite ? bip::read_write : bip::read_only;
    try {
      bip::file_mapping fm(path.c_str(), mode);
      // Map only what the file holds, so a short file can never fault.
      const std::size_t map_size =
          static_cast<std::size_t>(std::min<std::uint64_t>(file_size, sizeof(Region)));
      out.region.emplace(fm, mode, 0, map_size);
    } catch (const bip::interprocess_exception& e) {
      if (e.get_error_code() == bip::not_found_error)
        throw RegionError(RegionErrorCode::kMissing, path, "no such file");
      throw RegionError(RegionErrorCode::kIo, path, std::string("cannot map: ") + e.what());
    }
    const auto* hdr = static_cast<const RegionHeader*>(out.region->get_address());
    h.magic = hdr->magic.load(std::memory_order_acquire);
    h.layout_version = hdr->layout_version;
    h.header_size = hdr->header_size;
    h.total_size = hdr->total_size;
  }
  out.failure = validate_region_header(kind_of<Region>(), h, file_size);
  if (out.failure) {
    out.unpublished = file_size == 0 || (file_size >= sizeof(RegionHeader) && h.magic == 0);
    out.region.reset();
  }
  return out;
}

}  // namespace

template <class Region>
struct RegionMapping<Region>::Impl {
  bip::mapped_region region;
  int guard_token = -1;
  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() { guard_detail::unregister_mapping(guard_token); }  // before the unmap
};

template <class Region>
RegionMapping<Region>::RegionMapping(std::unique_ptr<Impl> impl, Region* region, Access access,
                                     bool created, std::filesystem::path path)
    : impl_(std::move(impl)),
      region_(region),
      access_(access),
      created_(created),
      path_(std::move(path)) {
  impl_->guard_token =
      guard_detail::register_mapping(impl_->region.get_address(), impl_->region.get_size());
}

template <class Region>
bool RegionMapping<Region>::damaged() const noexcept {
  return impl_ && guard_detail::damaged(impl_->guard_token);
}

template <class Region>
RegionMapping<Region>::RegionMapping(RegionMapping&&) noexcept = default;
template <class Region>
RegionMapping<Region>& RegionMapping<Region>::operator=(RegionMapping&&) noexcept = default;
template <class Region>
RegionMapping<Region>::~RegionMapping() = default;

template <class Region>
Region& RegionMapping<Region>::mutable_region() {
  if (access_ != Access::kReadWrite)
    throw RegionError(RegionErrorCode::kIo, path_.string(), "mapped read-only, cannot be written");
  return *region_;
}

template <class Region>
RegionMapping<Region> RegionMapping<Region>::create(const std::filesystem::path& fs_path,
                                                    const RegionCreateOptions& opts,
                                                    const Fill& fill) {
  constexpr RegionKind kind = kind_of<Region>();
  const std::string path = fs_path.string();
  const mode_t mode = kind == RegionKind::kLimits ? kLimitsFileMode : kUsageFileMode;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) throw RegionError(RegionErrorCode::kExists, path, "already exists");
    if (errno == ENOENT)
      throw RegionError(RegionErrorCode::kMissing, path, "its folder does not exist");
    throw_errno(RegionErrorCode::kIo, path, "cannot create", errno);
  }
  // From here on a failure removes the half-made file: nobody could ever use it.
  auto fail = [&](RegionErrorCode code, const std::string& detail) {
    ::close(fd);
    ::unlink(path.c_str());
    throw RegionError(code, path, detail);
  };
  if (::fchmod(fd, mode) != 0)
    fail(RegionErrorCode::kIo, std::string("cannot chmod: ") + std::strerror(errno));
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(sizeof(Region)));
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    if (::ftruncate(fd, static_cast<off_t>(sizeof(Region))) != 0)
      fail(RegionErrorCode::kIo, std::string("cannot size: ") + std::strerror(errno));
  } else if (rc != 0) {
    fail(RegionErrorCode::kIo, std::string("cannot allocate ") + std::to_string(sizeof(Region)) +
                                   " bytes: " + std::strerror(rc));
  }
  auto impl = std::make_unique<Impl>();
  try {
    bip::file_mapping fm(path.c_str(), bip::read_write);
    impl->region = bip::mapped_region(fm, bip::read_write, 0, sizeof(Region));
  } catch (const bip::interprocess_exception& e) {
    fail(RegionErrorCode::kIo, std::string("cannot map: ") + e.what());
  }
  ::close(fd);
  auto* region = static_cast<Region*>(impl->region.get_address());
  RegionHeader& h = region->header;
  h.layout_version = kLayoutVersion;
  h.header_size = sizeof(RegionHeader);
  h.total_size = sizeof(Region);
  h.created_unix_ns = realtime_ns();
  std::strncpy(h.alloc_id, opts.alloc_id.c_str(), kAllocIdBytes - 1);
  h.alloc_id[kAllocIdBytes - 1] = '\0';
  h.creator_pid = static_cast<std::uint32_t>(::getpid());
  h.flags = opts.flags;
  if (fill) {
    try {
      fill(*region);
    } catch (...) {
      ::unlink(path.c_str());
      throw;
    }
  }
  h.magic.store(region_magic(kind), std::memory_order_release);
  return RegionMapping(std::move(impl), region, Access::kReadWrite, true, fs_path);
}

template <class Region>
RegionMapping<Region> RegionMapping<Region>::open(const std::filesystem::path& fs_path,
                                                  Access access, std::chrono::milliseconds wait) {
  const std::string path = fs_path.string();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  OpenAttempt a = try_open<Region>(path, access);
  while (a.failure && a.unpublished && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    a = try_open<Region>(path, access);
  }
  if (a.failure) throw RegionError(a.failure->code, path, a.failure->detail);
  auto impl = std::make_unique<Impl>();
  impl->region = std::move(*a.region);
  auto* region = static_cast<Region*>(impl->region.get_address());
  return RegionMapping(std::move(impl), region, access, false, fs_path);
}

template <class Region>
RegionMapping<Region> RegionMapping<Region>::open_or_create(const std::filesystem::path& fs_path,
                                                            const RegionCreateOptions& opts,
                                                            const Fill& fill,
                                                            std::chrono::milliseconds wait) {
  const std::string path = fs_path.string();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    try {
      return create(fs_path, opts, fill);
    } catch (const RegionError& e) {
      if (e.code() != RegionErrorCode::kExists) throw;
    }
    std::optional<OpenAttempt> a;
    try {
      a.emplace(try_open<Region>(path, Access::kReadWrite));
    } catch (const RegionError& e) {
      if (e.code() == RegionErrorCode::kMissing) continue;  // its creator gave up: try again
      throw;
    }
    if (!a->failure) {
      auto impl = std::make_unique<Impl>();
      impl->region = std::move(*a->region);
      auto* region = static_cast<Region*>(impl->region.get_address());
      return RegionMapping(std::move(impl), region, Access::kReadWrite, false, fs_path);
    }
    if (!a->unpublished) throw RegionError(a->failure->code, path, a->failure->detail);
    if (std::chrono::steady_clock::now() >= deadline)
      throw RegionError(a->failure->code, path,
                        a->failure->detail + "; still so after " + std::to_string(wait.count()) +
                            " ms: remove the file if no process is creating it");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

template class RegionMapping<LimitsRegion>;
template class RegionMapping<UsageRegion>;

}  // namespace cushare::shm
