#pragma once
// Overflow-checked size arithmetic. A size a caller passes that does not fit
// in 64 bits once multiplied or rounded is an error, never the small number
// the wrapped arithmetic would give: every product and rounding of
// caller-supplied sizes goes through these.
#include <cstdint>

namespace fakegpu {

// Allocations larger than this are CUDA_ERROR_OUT_OF_MEMORY before any
// arithmetic (no device comes near 4 EiB), so rounding what remains to a
// granule can never wrap.
inline constexpr uint64_t kMaxAllocationBytes = 1ull << 62;

[[nodiscard]] inline bool mul_size(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

[[nodiscard]] inline bool add_size(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

// `v` rounded up to a multiple of `granule` (> 0); false when that does not fit.
[[nodiscard]] inline bool round_up(uint64_t v, uint64_t granule, uint64_t* out) {
  const uint64_t rest = v % granule;
  if (rest == 0) {
    *out = v;
    return true;
  }
  return add_size(v, granule - rest, out);
}

}  // namespace fakegpu
