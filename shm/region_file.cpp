#include "shm/region_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "shm/clock.hpp"
#include "shm/mapping_guard.hpp"

// Mapped with mmap(2) on the descriptor that was checked: Boost.Interprocess's
// file_mapping only opens by path, which would resolve the path a second time
// after the checks (a tenant could swap the file in between).

namespace cushare::shm {

namespace {

template <class Region>
constexpr RegionKind kind_of() {
  return std::is_same_v<Region, LimitsRegion> ? RegionKind::kLimits : RegionKind::kUsage;
}

[[noreturn]] void throw_errno(RegionErrorCode code, const std::string& path,
                              const std::string& what, int err) {
  throw RegionError(code, path, what + ": " + std::strerror(err));
}

// A descriptor closed on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

const char* file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// Opens an existing region file: never through a symbolic link, never
// blocking, close-on-exec, and never a file that is not a regular one, not
// even for a moment: the path is first opened as a path only (O_PATH opens
// nothing: no device driver's open runs, no FIFO waits), its type checked
// there, and only a regular file is then opened through that descriptor
// (/proc/thread-self/fd), so a tenant that swaps its usage file for a
// device node in between gets nothing opened but what was checked.
Fd open_existing(const std::string& path, Access access, struct stat& sb) {
  Fd at(::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (at.get() < 0) {
    const int err = errno;
    if (err == ENOENT) throw RegionError(RegionErrorCode::kMissing, path, "no such file");
    throw_errno(RegionErrorCode::kIo, path, "cannot open", err);
  }
  if (::fstat(at.get(), &sb) != 0) throw_errno(RegionErrorCode::kIo, path, "cannot stat", errno);
  if (S_ISLNK(sb.st_mode))
    throw RegionError(RegionErrorCode::kNotRegular, path,
                      "is a symbolic link; region files are never followed");
  if (S_ISDIR(sb.st_mode)) throw RegionError(RegionErrorCode::kNotRegular, path, "is a folder");
  if (!S_ISREG(sb.st_mode))
    throw RegionError(RegionErrorCode::kNotRegular, path,
                      std::string("is ") + file_type(sb.st_mode) + ", not a regular file");
  const int flags =
      (access == Access::kReadWrite ? O_RDWR : O_RDONLY) | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  // The calling thread's own descriptor table (a thread may have unshared
  // it from the process's).
  const std::string self = "/proc/thread-self/fd/" + std::to_string(at.get());
  Fd fd(::open(self.c_str(), flags));
  if (fd.get() < 0) {
    const int err = errno;
    if (err != ENOENT && err != EACCES && err != EPERM)
      throw_errno(RegionErrorCode::kIo, path, "cannot open", err);
    // No /proc here (or a policy that refuses it): the path again, checked
    // below on what was opened (a device swapped in between would have been
    // opened).
    fd = Fd(::open(path.c_str(), flags | O_NOFOLLOW));
    if (fd.get() < 0) {
      const int again = errno;
      if (again == ENOENT) throw RegionError(RegionErrorCode::kMissing, path, "no such file");
      throw_errno(RegionErrorCode::kIo, path, "cannot open", again);
    }
  }
  const dev_t checked_dev = sb.st_dev;
  const ino_t checked_ino = sb.st_ino;
  if (::fstat(fd.get(), &sb) != 0) throw_errno(RegionErrorCode::kIo, path, "cannot stat", errno);
  if (!S_ISREG(sb.st_mode))
    throw RegionError(RegionErrorCode::kNotRegular, path,
                      std::string("is ") + file_type(sb.st_mode) + ", not a regular file");
  if (sb.st_dev != checked_dev || sb.st_ino != checked_ino)
    throw RegionError(RegionErrorCode::kNotRegular, path,
                      "was replaced while it was opened; not used");
  return fd;
}

void* map_fd(int fd, std::size_t size, Access access) {
  const int prot = access == Access::kReadWrite ? PROT_READ | PROT_WRITE : PROT_READ;
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// One validated-or-not attempt at opening; never throws for invalid content
// so open_or_create can tell "not yet published" from "broken".
struct OpenAttempt {
  void* address = nullptr;
  std::size_t size = 0;
  struct stat file {};
  std::optional<ValidationFailure> failure;
  bool unpublished = false;  // zero-length / magic 0: a creator may still be at work
};

template <class Region>
OpenAttempt try_open(const std::string& path, Access access) {
  OpenAttempt out;
  Fd fd = open_existing(path, access, out.file);
  const auto file_size = static_cast<std::uint64_t>(out.file.st_size);
  HeaderFields h;
  if (file_size >= sizeof(RegionHeader)) {
    // Map only what the file holds, so a short file can never fault.
    out.size = static_cast<std::size_t>(std::min<std::uint64_t>(file_size, sizeof(Region)));
    out.address = map_fd(fd.get(), out.size, access);
    if (!out.address) throw_errno(RegionErrorCode::kIo, path, "cannot map", errno);
    const auto* hdr = static_cast<const RegionHeader*>(out.address);
    h.magic = hdr->magic.load(std::memory_order_acquire);
    h.layout_version = hdr->layout_version;
    h.header_size = hdr->header_size;
    h.total_size = hdr->total_size;
  }
  out.failure = validate_region_header(kind_of<Region>(), h, file_size);
  if (out.failure) {
    out.unpublished = file_size == 0 || (file_size >= sizeof(RegionHeader) && h.magic == 0);
    if (out.address) ::munmap(out.address, out.size);
    out.address = nullptr;
  }
  return out;
}

}  // namespace

template <class Region>
struct RegionMapping<Region>::Impl {
  void* address = nullptr;
  std::size_t size = 0;
  int guard_token = -1;
  Impl(void* a, std::size_t s) : address(a), size(s) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    guard_detail::unregister_mapping(guard_token);  // before the unmap
    if (address) ::munmap(address, size);
  }
};

namespace {
template <class Identity>
Identity identity_of(const struct stat& sb) {
  return Identity{static_cast<std::uint64_t>(sb.st_dev), static_cast<std::uint64_t>(sb.st_ino),
                  static_cast<std::uint32_t>(sb.st_uid)};
}
}  // namespace

template <class Region>
RegionMapping<Region>::RegionMapping(std::unique_ptr<Impl> impl, Region* region, Access access,
                                     bool created, std::filesystem::path path, FileIdentity file)
    : impl_(std::move(impl)),
      region_(region),
      access_(access),
      created_(created),
      path_(std::move(path)),
      file_(file) {
  impl_->guard_token = guard_detail::register_mapping(impl_->address, impl_->size);
}

template <class Region>
bool RegionMapping<Region>::damaged() const noexcept {
  return impl_ && guard_detail::damaged(impl_->guard_token);
}

template <class Region>
bool RegionMapping<Region>::still_at(const std::filesystem::path& path) const {
  struct stat sb {};
  if (::lstat(path.c_str(), &sb) != 0 || !S_ISREG(sb.st_mode)) return false;
  return static_cast<std::uint64_t>(sb.st_dev) == file_.dev &&
         static_cast<std::uint64_t>(sb.st_ino) == file_.ino;
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
  // O_EXCL never follows a symbolic link, dangling or not: it is EEXIST.
  const int raw = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (raw < 0) {
    if (errno == EEXIST) throw RegionError(RegionErrorCode::kExists, path, "already exists");
    if (errno == ENOENT)
      throw RegionError(RegionErrorCode::kMissing, path, "its folder does not exist");
    throw_errno(RegionErrorCode::kIo, path, "cannot create", errno);
  }
  Fd fd(raw);
  // From here on a failure removes the half-made file: nobody could ever use it.
  auto fail = [&](RegionErrorCode code, const std::string& detail) {
    ::unlink(path.c_str());
    throw RegionError(code, path, detail);
  };
  if (::fchmod(fd.get(), mode) != 0)
    fail(RegionErrorCode::kIo, std::string("cannot chmod: ") + std::strerror(errno));
  const int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(sizeof(Region)));
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    if (::ftruncate(fd.get(), static_cast<off_t>(sizeof(Region))) != 0)
      fail(RegionErrorCode::kIo, std::string("cannot size: ") + std::strerror(errno));
  } else if (rc != 0) {
    fail(RegionErrorCode::kIo, std::string("cannot allocate ") + std::to_string(sizeof(Region)) +
                                   " bytes: " + std::strerror(rc));
  }
  struct stat sb {};
  if (::fstat(fd.get(), &sb) != 0)
    fail(RegionErrorCode::kIo, std::string("cannot stat: ") + std::strerror(errno));
  void* address = map_fd(fd.get(), sizeof(Region), Access::kReadWrite);
  if (!address) fail(RegionErrorCode::kIo, std::string("cannot map: ") + std::strerror(errno));
  auto impl = std::make_unique<Impl>(address, sizeof(Region));
  auto* region = static_cast<Region*>(address);
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
  return RegionMapping(std::move(impl), region, Access::kReadWrite, true, fs_path,
                       identity_of<FileIdentity>(sb));
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
  auto impl = std::make_unique<Impl>(a.address, a.size);
  auto* region = static_cast<Region*>(a.address);
  return RegionMapping(std::move(impl), region, access, false, fs_path,
                       identity_of<FileIdentity>(a.file));
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
      auto impl = std::make_unique<Impl>(a->address, a->size);
      auto* region = static_cast<Region*>(a->address);
      return RegionMapping(std::move(impl), region, Access::kReadWrite, false, fs_path,
                           identity_of<FileIdentity>(a->file));
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
