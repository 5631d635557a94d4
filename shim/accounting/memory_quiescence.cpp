#include "shim/accounting/memory_quiescence.hpp"

#include <sched.h>
#include <time.h>

#include "shm/clock.hpp"
#include "shm/futex.hpp"
#include "shm/process_slots.hpp"

namespace cushare::shim {
namespace detail {

constinit std::atomic<std::uint32_t> g_window_open{0};
__attribute__((tls_model("initial-exec"))) constinit thread_local std::uint32_t t_memory_ops = 0;

namespace {
// The thread whose window is open: its own calls go through.
__attribute__((tls_model("initial-exec"))) constinit thread_local bool t_measuring = false;
}  // namespace

void wait_for_window_to_close(shm::ProcessSlot& slot) noexcept {
  // The measuring thread, and a call nested in one of this thread's own
  // (the window waits for the outer one anyway), go on.
  if (t_measuring || t_memory_ops > 1) return;
  for (;;) {
    slot.memory_ops_ended.fetch_add(1, std::memory_order_seq_cst);  // not in flight meanwhile
    while (g_window_open.load(std::memory_order_seq_cst))
      shm::futex_wait(g_window_open, 1, kQuietWaitNs);
    slot.memory_ops_begun.fetch_add(1, std::memory_order_seq_cst);
    if (!g_window_open.load(std::memory_order_seq_cst)) return;
  }
}

}  // namespace detail

QuietWindow::QuietWindow(const AllocationState& st) noexcept {
  detail::t_measuring = true;
  detail::g_window_open.store(1, std::memory_order_seq_cst);
  if (!st.slot) return;
  const shm::ProcessSlot& slot = *st.slot;
  const std::uint64_t own = detail::t_memory_ops;
  const std::uint64_t deadline = shm::monotonic_ns() + kQuietWaitNs;
  for (unsigned round = 0;; ++round) {
    if (shm::memory_ops_in_flight(slot) == own) {
      quiet_ = true;
      return;
    }
    if (shm::monotonic_ns() >= deadline) break;
    if (round < 64) {
      sched_yield();
    } else {
      timespec ts{.tv_sec = 0, .tv_nsec = 50'000};
      nanosleep(&ts, nullptr);
    }
  }
}

QuietWindow::~QuietWindow() {
  detail::g_window_open.store(0, std::memory_order_seq_cst);
  shm::futex_wake_all(detail::g_window_open);
  detail::t_measuring = false;
}

void quiescence_reset_after_fork() noexcept {
  detail::g_window_open.store(0, std::memory_order_relaxed);
  detail::t_measuring = false;
}

}  // namespace cushare::shim
