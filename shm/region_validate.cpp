#include "shm/region_validate.hpp"

#include <cstdio>

#include "shm/layout.hpp"

namespace cushare::shm {
namespace {

std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

const char* to_string(RegionErrorCode code) {
  switch (code) {
    case RegionErrorCode::kMissing:
      return "missing";
    case RegionErrorCode::kIo:
      return "io";
    case RegionErrorCode::kBadMagic:
      return "bad-magic";
    case RegionErrorCode::kBadVersion:
      return "bad-version";
    case RegionErrorCode::kBadSize:
      return "bad-size";
    case RegionErrorCode::kTruncated:
      return "truncated";
    case RegionErrorCode::kExists:
      return "exists";
    case RegionErrorCode::kNotRegular:
      return "not-regular";
    case RegionErrorCode::kBadOwner:
      return "bad-owner";
  }
  return "unknown";
}

const char* to_string(RegionKind kind) {
  return kind == RegionKind::kLimits ? "limits" : "usage";
}

std::uint64_t region_magic(RegionKind kind) {
  return kind == RegionKind::kLimits ? kLimitsMagic : kUsageMagic;
}

std::uint64_t region_size(RegionKind kind) {
  return kind == RegionKind::kLimits ? sizeof(LimitsRegion) : sizeof(UsageRegion);
}

std::optional<ValidationFailure> validate_region_header(RegionKind kind, const HeaderFields& h,
                                                        std::uint64_t file_size) {
  const std::string what = std::string("cushare ") + to_string(kind) + " region";
  if (file_size == 0)
    return ValidationFailure{RegionErrorCode::kTruncated, "zero-length file, not a " + what};
  if (file_size < sizeof(RegionHeader))
    return ValidationFailure{RegionErrorCode::kTruncated,
                             "truncated: " + std::to_string(file_size) +
                                 " bytes is shorter than a region header (" +
                                 std::to_string(sizeof(RegionHeader)) + ")"};
  if (h.magic == 0)
    return ValidationFailure{RegionErrorCode::kBadMagic,
                             "not initialised (magic is 0): its creator has not published it "
                             "yet or died while creating it"};
  if (h.magic != region_magic(kind)) {
    const RegionKind other = kind == RegionKind::kLimits ? RegionKind::kUsage : RegionKind::kLimits;
    if (h.magic == region_magic(other))
      return ValidationFailure{RegionErrorCode::kBadMagic, std::string("is a ") + to_string(other) +
                                                               " region, expected a " + what};
    return ValidationFailure{RegionErrorCode::kBadMagic,
                             "bad magic " + hex(h.magic) + ", not a " + what};
  }
  if (h.layout_version != kLayoutVersion)
    return ValidationFailure{RegionErrorCode::kBadVersion, "layout version " +
                                                               std::to_string(h.layout_version) +
                                                               ", this build understands version " +
                                                               std::to_string(kLayoutVersion)};
  if (h.header_size != sizeof(RegionHeader))
    return ValidationFailure{RegionErrorCode::kBadSize,
                             "header_size " + std::to_string(h.header_size) + ", expected " +
                                 std::to_string(sizeof(RegionHeader))};
  const std::uint64_t expected = region_size(kind);
  if (h.total_size != expected)
    return ValidationFailure{
        RegionErrorCode::kBadSize,
        "total_size " + std::to_string(h.total_size) + ", expected " + std::to_string(expected)};
  if (file_size < expected)
    return ValidationFailure{RegionErrorCode::kTruncated,
                             "truncated: file has " + std::to_string(file_size) +
                                 " bytes, the header says " + std::to_string(expected)};
  if (file_size > expected)
    return ValidationFailure{
        RegionErrorCode::kBadSize,
        "file has " + std::to_string(file_size) + " bytes, expected " + std::to_string(expected)};
  return std::nullopt;
}

}  // namespace cushare::shm
