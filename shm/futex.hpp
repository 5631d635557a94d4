// Sleeping on a 32-bit word of a region (the lease futex the daemon bumps on
// every grant) or of a process's own memory. Never FUTEX_PRIVATE: the word
// may live in a file other processes map, read-only for the waiters.
#pragma once

#include <atomic>
#include <cstdint>

namespace cushare::shm {

// Sleeps while `word` holds `expected`, until woken or `timeout_ns` passed
// (spurious returns included: callers look at their condition again).
void futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::uint64_t timeout_ns) noexcept;
// Wakes every thread of every process waiting on `word`.
void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept;

}  // namespace cushare::shm
