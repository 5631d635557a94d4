#include "node/region_reader.hpp"

namespace cushare::tools {

std::string region_error_message(const shm::RegionError& error) {
  std::string message = error.what();
  switch (error.code()) {
    case shm::RegionErrorCode::kBadVersion:
      return message + ": use the cusharectl that matches the installed cushare";
    case shm::RegionErrorCode::kBadMagic:
    case shm::RegionErrorCode::kBadSize:
    case shm::RegionErrorCode::kTruncated:
      return message +
             ": the file is damaged or not a cushare region; remove the allocation and create it "
             "again";
    case shm::RegionErrorCode::kIo:
      if (message.find("ermission denied") != std::string::npos)
        return message + ": run as root or as the run dir's owner";
      return message;
    case shm::RegionErrorCode::kNotRegular:
    case shm::RegionErrorCode::kBadOwner:
      return message +
             ": the allocation's processes can write its folder; node tools never follow or "
             "trust such a file";
    case shm::RegionErrorCode::kMissing:
    case shm::RegionErrorCode::kExists:
      return message;
  }
  return message;
}

LimitsFile open_limits(const std::string& path, bool writable) {
  try {
    return LimitsFile{shm::LimitsMapping::open(
        path, writable ? shm::Access::kReadWrite : shm::Access::kReadOnly)};
  } catch (const shm::RegionError& e) {
    throw RegionReadError(region_error_message(e));
  }
}

UsageFile open_usage(const std::string& path) {
  try {
    return UsageFile{shm::UsageMapping::open(path, shm::Access::kReadOnly)};
  } catch (const shm::RegionError& e) {
    throw RegionReadError(region_error_message(e));
  }
}

}  // namespace cushare::tools
