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
#include <vector>

#include "shim/gate/duty_cycle_plan.hpp"

namespace cushare::shim {

inline constexpr char kDutyTableName[] = "duty";  // in the node run dir
inline constexpr std::uint32_t kDutyTableSlots = 64;
inline constexpr std::uint64_t kDutyClaimTtlNs = 1'000'000'000;
inline constexpr std::uint64_t kDutyRefreshNs = 100'000'000;

// Another allocation's live claim on the same GPU: its id (its folder's name
// under RUN/alloc) and the index of the GPU's entry in its regions
// (0xFFFFFFFF: not named, a claim written by an older shim).
struct DutyNeighbour {
  std::string alloc_id;
  std::uint32_t gpu_index = 0;
  bool operator==(const DutyNeighbour&) const = default;
};

// The slot of allocation folder `alloc_folder` on GPU `gpu_uuid` (entry
// `gpu_index` of its regions) with limit `limit_pct`, refreshing its claim.
// `now`: CLOCK_MONOTONIC. `neighbours` (if given) receives the other live
// claims on the GPU; it is left empty where there is no table, or where
// this allocation's claim could not be written (the table full or read-only).
DutySlot duty_slot_for(const std::string& alloc_folder, const std::string& gpu_uuid,
                       std::uint32_t gpu_index, std::uint32_t limit_pct, std::uint64_t now,
                       std::vector<DutyNeighbour>* neighbours = nullptr) noexcept;

}  // namespace cushare::shim
