// Pure validation of a region header against this build's layout: no I/O,
// so the fuzzer and the unit tests can feed it anything.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "shm/region_error.hpp"

namespace cushare::shm {

enum class RegionKind { kLimits, kUsage };

const char* to_string(RegionKind kind);
std::uint64_t region_magic(RegionKind kind);
std::uint64_t region_size(RegionKind kind);

// The header fields validation looks at, copied out of the mapping (magic
// with an acquire load) so validation never reads shared memory itself.
struct HeaderFields {
  std::uint64_t magic = 0;
  std::uint32_t layout_version = 0;
  std::uint32_t header_size = 0;
  std::uint64_t total_size = 0;
};

struct ValidationFailure {
  RegionErrorCode code;
  std::string detail;  // one line, without the path
};

// Checks, in this order: file long enough for a header (kTruncated), magic
// (kBadMagic; magic 0 = "not initialised"), layout version (kBadVersion),
// header_size and total_size (kBadSize), file size vs total_size (kTruncated
// when shorter, kBadSize when longer). `header` is ignored when the file is
// shorter than a header.
std::optional<ValidationFailure> validate_region_header(RegionKind kind, const HeaderFields& header,
                                                        std::uint64_t file_size);

}  // namespace cushare::shm
