// The one exception type of the region mapping code: what() is one line that
// names the file and says what is wrong with it.
#pragma once

#include <stdexcept>
#include <string>

namespace cushare::shm {

enum class RegionErrorCode {
  kMissing,     // the file does not exist
  kIo,          // open/map/stat/allocate failed (permissions, ENOSPC, ...)
  kBadMagic,    // not a cushare region of this kind, or never published
  kBadVersion,  // a cushare region of another layout version
  kBadSize,     // header_size / total_size / file size disagree with this build
  kTruncated,   // shorter than its header says (or zero-length)
  kExists,      // exclusive create found an existing file
  kNotRegular,  // a symbolic link, FIFO, device, socket or folder where a region file belongs
  kBadOwner,    // owned by another uid than the one the caller requires
};

const char* to_string(RegionErrorCode code);

class RegionError : public std::runtime_error {
 public:
  RegionError(RegionErrorCode code, std::string path, const std::string& detail)
      : std::runtime_error(path + ": " + detail), code_(code), path_(std::move(path)) {}
  RegionErrorCode code() const { return code_; }
  const std::string& path() const { return path_; }

 private:
  RegionErrorCode code_;
  std::string path_;
};

}  // namespace cushare::shm
