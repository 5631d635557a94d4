#include "shm/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace cushare::shm {

// The raw syscall: glibc has no futex wrapper, and the shim's glibc floor
// has nothing newer to offer.
void futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::uint64_t timeout_ns) noexcept {
  timespec ts{.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000),
              .tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000)};
  // FUTEX_WAIT only reads the word, so a read-only mapping serves.
  syscall(SYS_futex, const_cast<std::uint32_t*>(reinterpret_cast<const std::uint32_t*>(&word)),
          FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

}  // namespace cushare::shm
