// Pure parsers for the quantities users write in environment variables.
// No I/O, no exceptions, no locale: every function maps a string to a value
// or to an error message that quotes the offending text. Callers (quota_spec)
// prefix the variable name.
#pragma once

#include <cstdint>
#include <string_view>

#include "shm/parsed.hpp"

namespace cushare::shm {

// A Kubernetes resource quantity as a byte count: plain or decimal numbers
// ("1000", "1.5"), binary suffixes Ki Mi Gi Ti Pi Ei, decimal suffixes k M G T P E,
// and decimal exponents ("1e9", "2E3"). Fractions round up to the next byte,
// as Kubernetes does. Rejected: empty, any whitespace, a sign other than '+',
// negative values, unknown suffixes, the milli suffix 'm' (for memory it is
// almost always a typo for Mi; HAMi variables use parse_hami_memory instead),
// and values that do not fit below kUnlimited (UINT64_MAX).
Parsed<std::uint64_t> parse_k8s_quantity(std::string_view text);

// A percentage "<number>%" with up to three decimals, 0 < p <= 100, returned
// in thousandths of a percent (milli-percent, 1..100000). "25%" -> 25000.
// Rejected: "%", "50%%", "0%", "101%", whitespace, signs.
Parsed<std::uint32_t> parse_percent_milli(std::string_view text);

// A memory limit as users write it in CUSHARE_MEMORY_LIMIT: either a
// Kubernetes quantity or a percent of the card.
struct MemoryAmount {
  enum class Kind { kBytes, kPercentOfCard };
  Kind kind = Kind::kBytes;
  std::uint64_t bytes = 0;          // kBytes
  std::uint32_t percent_milli = 0;  // kPercentOfCard: 1..100000
};
Parsed<MemoryAmount> parse_memory_amount(std::string_view text);

// Bytes of `amount` on a card with `total_bytes` of memory (percent rounds
// down to whole bytes; never more than the card for percents).
std::uint64_t resolve_memory_amount(const MemoryAmount& amount, std::uint64_t total_bytes);

// HAMi-core units (CUDA_DEVICE_MEMORY_LIMIT): an unsigned integer with an
// optional single suffix k/m/g (either case) = KiB/MiB/GiB; no suffix = bytes.
// "3000m" = 3000 MiB. Rejected: empty, whitespace, signs, fractions, other
// suffixes, overflow.
Parsed<std::uint64_t> parse_hami_memory(std::string_view text);

// A compute limit in percent (CUSHARE_COMPUTE_LIMIT): an integer 1..100,
// with or without a trailing '%' ("50" or "50%").
Parsed<std::uint32_t> parse_compute_percent(std::string_view text);

// An unsigned decimal integer within [min, max] ("007" is fine, "" / "+1" /
// "1.0" / " 1" are not).
Parsed<std::uint64_t> parse_uint_in_range(std::string_view text, std::uint64_t min,
                                          std::uint64_t max);

}  // namespace cushare::shm
