// What an allocation takes from the device, as the shim charges it: the driver
// hands out device memory in 512-byte blocks for small allocations (packed
// into shared pages by its sub-allocator) and in whole 2 MiB pages from 2 MiB
// up. Charging the request as asked would let many small allocations hold far
// more than the quota (a million cuMemAlloc(1) take at least 512 MB). The rule
// is the same on every architecture cushare supports (Volta to Blackwell);
// fakegpu models it, and NVML ground truth is the backstop where a real
// driver rounds otherwise (docs/shim.md).
#pragma once

#include <cstdint>

namespace cushare::shim {

inline constexpr std::uint64_t kSmallBlockBytes = 512;
inline constexpr std::uint64_t kLargePageBytes = 2ull << 20;

// The bytes charged for a request of `bytes` (saturating: a request that
// cannot be rounded is charged as all of memory, and refused).
constexpr std::uint64_t charged_size(std::uint64_t bytes) noexcept {
  const std::uint64_t unit = bytes >= kLargePageBytes ? kLargePageBytes : kSmallBlockBytes;
  if (bytes > UINT64_MAX - (unit - 1)) return UINT64_MAX;
  return (bytes + unit - 1) / unit * unit;
}

// a * b, or UINT64_MAX when it does not fit (a hostile size must not wrap
// into a small charge).
constexpr std::uint64_t saturating_product(std::uint64_t a, std::uint64_t b) noexcept {
  if (a != 0 && b > UINT64_MAX / a) return UINT64_MAX;
  return a * b;
}

static_assert(charged_size(1) == 512 && charged_size(512) == 512 && charged_size(513) == 1024);
static_assert(charged_size((2ull << 20) - 1) == 2ull << 20);
static_assert(charged_size((2ull << 20) + 1) == 4ull << 20);
static_assert(charged_size(UINT64_MAX) == UINT64_MAX);

}  // namespace cushare::shim
