#include "shim/accounting/memory_quiescence.hpp"

#include <sched.h>

#include "shm/clock.hpp"
#include "shm/futex.hpp"
#include "shm/process_slots.hpp"

namespace cushare::shim {
namespace detail {

constinit std::atomic<std::uint32_t> g_window_open{0};
constinit std::atomic<bool> g_window_spoiled{false};
__attribute__((tls_model("initial-exec"))) constinit thread_local std::uint32_t t_memory_ops = 0;

namespace {
// The thread whose window is open: its own calls go through.
__attribute__((tls_model("initial-exec"))) constinit thread_local bool t_measuring = false;

// A short sleep that is not a cancellation point (a measurement may not be
// cut short between its two samples).
void pause_briefly() noexcept {
  std::atomic<std::uint32_t> never{0};
  shm::futex_wait(never, 0, 50'000);
}
}  // namespace

void wait_for_window_to_close(shm::ProcessSlot& slot) noexcept {
  // The measuring thread, and a call nested in one of this thread's own
  // (the window waits for the outer one anyway), go on.
  if (t_measuring || t_memory_ops > 1) return;
  const std::uint64_t deadline = shm::monotonic_ns() + kQuietWaitNs;
  for (;;) {
    slot.memory_ops_ended.fetch_add(1, std::memory_order_seq_cst);  // not in flight meanwhile
    std::uint64_t now = shm::monotonic_ns();
    while (g_window_open.load(std::memory_order_seq_cst) && now < deadline) {
      shm::futex_wait(g_window_open, 1, deadline - now);
      now = shm::monotonic_ns();
    }
    slot.memory_ops_begun.fetch_add(1, std::memory_order_seq_cst);
    if (!g_window_open.load(std::memory_order_seq_cst)) return;
    if (now >= deadline) {
      // Held back as long as a measurement may wait for a call: this one
      // goes on, and whatever window is open measures nothing it trusts.
      g_window_spoiled.store(true, std::memory_order_seq_cst);
      return;
    }
  }
}

}  // namespace detail

QuietWindow::QuietWindow(const AllocationState& st) noexcept : slot_(st.slot) {
  detail::t_measuring = true;
  detail::g_window_spoiled.store(false, std::memory_order_seq_cst);
  detail::g_window_open.store(1, std::memory_order_seq_cst);
  if (!slot_) return;
  const std::uint64_t own = detail::t_memory_ops;
  const std::uint64_t deadline = shm::monotonic_ns() + kQuietWaitNs;
  for (unsigned round = 0;; ++round) {
    if (shm::memory_ops_in_flight(*slot_) == own) {
      quiet_ = true;
      break;
    }
    if (shm::monotonic_ns() >= deadline) break;
    if (round < 64) {
      sched_yield();
    } else {
      detail::pause_briefly();
    }
  }
  // The window is a memory call itself to the daemon, whose overhead
  // reconciliation must not land between the two samples.
  slot_->memory_ops_begun.fetch_add(1, std::memory_order_seq_cst);
}

QuietWindow::~QuietWindow() {
  if (slot_) slot_->memory_ops_ended.fetch_add(1, std::memory_order_seq_cst);
  detail::g_window_open.store(0, std::memory_order_seq_cst);
  shm::futex_wake_all(detail::g_window_open);
  detail::t_measuring = false;
}

bool QuietWindow::quiet() const noexcept {
  return quiet_ && !detail::g_window_spoiled.load(std::memory_order_seq_cst);
}

void quiescence_reset_after_fork() noexcept {
  detail::g_window_open.store(0, std::memory_order_relaxed);
  detail::g_window_spoiled.store(false, std::memory_order_relaxed);
  detail::t_measuring = false;
}

}  // namespace cushare::shim
