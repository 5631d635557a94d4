// Read-only mappings of an allocation's region files for cusharectl. Every
// check a region must pass before it is trusted (size, magic, layout
// version) fails with a one-line message saying what to do.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "shm/layout.hpp"

namespace cushare::tools {

class RegionReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file mapped read-only (or read-write for `set` without the daemon).
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const std::string& path, bool writable);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
};

struct LimitsFile {
  MappedFile file;
  shm::LimitsRegion* region() const { return static_cast<shm::LimitsRegion*>(file.data()); }
};
struct UsageFile {
  MappedFile file;
  const shm::UsageRegion* region() const {
    return static_cast<const shm::UsageRegion*>(file.data());
  }
};

// Throws RegionReadError when the file is missing, unreadable, too small, or
// of another magic, layout version or size.
LimitsFile open_limits(const std::string& path, bool writable = false);
UsageFile open_usage(const std::string& path);

// Checks a mapped header against what this build expects.
void validate_header(const shm::RegionHeader& header, std::size_t file_size, std::uint64_t magic,
                     std::size_t expected_size, const std::string& path);

}  // namespace cushare::tools
