// Human-readable renderings of the quantities cusharectl shows in tables.
// Tables are for people (binary units, short durations); --json always
// carries raw bytes and nanoseconds instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cushare::tools {

// 8589934592 -> "8Gi", 3435973837 -> "3.2Gi", 1536 -> "1.5Ki", 512 -> "512B".
std::string format_bytes(std::uint64_t bytes);

// Memory quota: std::nullopt (no quota) -> "none".
std::string format_quota(std::optional<std::uint64_t> bytes);

// 0 -> "0s", 850'000'000 -> "850ms", 12.3 s -> "12.3s", 303 s -> "5m03s", 7500 s -> "2h05m".
std::string format_duration_ns(std::uint64_t ns);

// Parts per million of a GPU as a percentage: 333333 -> "33.3%", 1000000 -> "100%".
std::string format_ppm(std::optional<std::uint32_t> ppm);

// CLOCK_REALTIME nanoseconds as UTC ISO 8601 with seconds: "2026-11-29T07:00:00Z".
std::string format_unix_time(std::uint64_t unix_ns);

}  // namespace cushare::tools
