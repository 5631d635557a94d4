// The node's table of duty-cycle windows (duty_cycle_plan.hpp): RUN/duty,
// shared by the shims of every allocation folder RUN/alloc/<id> while no
// daemon arbitrates. Each allocation keeps a claim (id, GPU, limit) fresh;
// claims not refreshed for a second are ignored. Read and written under
// flock, at most every 100 ms per process and GPU; any failure (a container
// that sees only its own folder, a read-only mount) means a slot of the whole
// period (the busy budget still holds the cap).
#pragma once

#include <cstdint>
#include <string>

#include "shim/gate/duty_cycle_plan.hpp"

namespace cushare::shim {

inline constexpr char kDutyTableName[] = "duty";  // in the node run dir
inline constexpr std::uint32_t kDutyTableSlots = 64;
inline constexpr std::uint64_t kDutyClaimTtlNs = 1'000'000'000;
inline constexpr std::uint64_t kDutyRefreshNs = 100'000'000;

// The slot of allocation folder `alloc_folder` on GPU `gpu_uuid` with limit
// `limit_pct`, refreshing its claim. `now`: CLOCK_MONOTONIC.
DutySlot duty_slot_for(const std::string& alloc_folder, const std::string& gpu_uuid,
                       std::uint32_t limit_pct, std::uint64_t now) noexcept;

}  // namespace cushare::shim
