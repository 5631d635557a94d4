// The node's clocks, read the same way by every component. Timestamps other
// processes read (leases, heartbeats, drain marks) are CLOCK_MONOTONIC, which
// PID namespaces share; creation times are CLOCK_REALTIME. clock_gettime()
// only: the shim that includes this is linked against an old glibc.
#pragma once

#include <time.h>

#include <cstdint>

namespace cushare::shm {

inline std::uint64_t clock_ns(clockid_t id) noexcept {
  timespec ts{};
  clock_gettime(id, &ts);  // vDSO for these clocks: no syscall
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

inline std::uint64_t monotonic_ns() noexcept {
  return clock_ns(CLOCK_MONOTONIC);
}
inline std::uint64_t realtime_ns() noexcept {
  return clock_ns(CLOCK_REALTIME);
}

}  // namespace cushare::shm
