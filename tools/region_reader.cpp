#include "tools/region_reader.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace cushare::tools {

MappedFile::MappedFile(const std::string& path, bool writable) : path_(path) {
  const int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) throw RegionReadError(path + " does not exist");
    if (err == EACCES)
      throw RegionReadError("permission denied opening " + path +
                            (writable ? " for writing: run as root or the run dir's owner"
                                      : ": run as root or ask for read access"));
    throw RegionReadError("cannot open " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw RegionReadError("cannot stat " + path + ": " + std::strerror(err));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ < sizeof(shm::RegionHeader)) {
    ::close(fd);
    throw RegionReadError(
        path + " is " + std::to_string(size_) +
        " bytes, too small to be a cushare region: remove it and recreate the allocation");
  }
  void* addr = ::mmap(nullptr, size_, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (addr == MAP_FAILED) throw RegionReadError("cannot map " + path + ": " + std::strerror(err));
  data_ = addr;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

void validate_header(const shm::RegionHeader& header, std::size_t file_size, std::uint64_t magic,
                     std::size_t expected_size, const std::string& path) {
  const std::uint64_t found = header.magic.load(std::memory_order_acquire);
  if (found == 0)
    throw RegionReadError(path +
                          " is not initialised yet (its creator has not finished or crashed): "
                          "retry, or remove the allocation and create it again");
  if (found != magic)
    throw RegionReadError(
        path + " is not a cushare " +
        (magic == shm::kLimitsMagic ? std::string("limits") : std::string("usage")) +
        " region (wrong magic number)");
  if (header.layout_version != shm::kLayoutVersion)
    throw RegionReadError(path + " has layout version " + std::to_string(header.layout_version) +
                          ", this cusharectl reads version " + std::to_string(shm::kLayoutVersion) +
                          ": use the cusharectl that matches the installed cushare");
  if (header.total_size != expected_size || file_size < expected_size)
    throw RegionReadError(path + " has size " + std::to_string(file_size) + " (header says " +
                          std::to_string(header.total_size) + "), expected " +
                          std::to_string(expected_size) +
                          ": the file is damaged or of another build");
}

LimitsFile open_limits(const std::string& path, bool writable) {
  LimitsFile limits{MappedFile(path, writable)};
  validate_header(limits.region()->header, limits.file.size(), shm::kLimitsMagic,
                  sizeof(shm::LimitsRegion), path);
  return limits;
}

UsageFile open_usage(const std::string& path) {
  UsageFile usage{MappedFile(path, false)};
  validate_header(usage.region()->header, usage.file.size(), shm::kUsageMagic,
                  sizeof(shm::UsageRegion), path);
  return usage;
}

}  // namespace cushare::tools
