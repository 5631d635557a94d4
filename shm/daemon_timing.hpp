// Timings of the daemon's side of the node contract, one definition for every
// reader: the shim's launch gate, cusharectl and the daemon's own status.
#pragma once

#include <cstdint>

namespace cushare::shm {

// The daemon stamps LimitsRegion::daemon_heartbeat_ns on every tick (at least
// every few milliseconds while it runs). A heartbeat older than this means the
// daemon is gone: shims stop waiting for leases (capped allocations fall back
// to the local duty cycle) and cusharectl reports it down, at the same moment.
inline constexpr std::uint64_t kDaemonHeartbeatStaleNs = 500'000'000;

// How long a shim waits for a daemon to discover a new allocation (a limits
// region never ticked) before it runs it without one.
inline constexpr std::uint64_t kFirstHeartbeatWaitNs = 500'000'000;

// How far past a cut lease's expiry a launch in it may be expected to run
// (kLeaseCutBit in layout.hpp): the most the daemon ends a cut lease ahead
// of the return it is cut for (SchedulerConfig::min_cut_lease_ns).
inline constexpr std::uint64_t kCutLeaseOverrunNs = 1'000'000;

}  // namespace cushare::shm
