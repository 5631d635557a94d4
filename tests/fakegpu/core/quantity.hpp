#pragma once
// Kubernetes-style byte quantities ("80Gi", "300Mi", "1.5G", "4096"), parsed
// here rather than with cushare's shm library so fakegpu stays an independent oracle.
#include <cstdint>
#include <optional>
#include <string_view>

namespace fakegpu {

// Returns the number of bytes, or nullopt for anything malformed, negative,
// fractional in bytes, or above 2^63.
std::optional<uint64_t> parse_quantity(std::string_view text);

// Parses a plain non-negative decimal integer (no sign, no suffix).
std::optional<uint64_t> parse_uint(std::string_view text);

}  // namespace fakegpu
