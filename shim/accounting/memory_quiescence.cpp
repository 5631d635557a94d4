#include "shim/accounting/memory_quiescence.hpp"

#include <sched.h>

#include "shm/clock.hpp"
#include "shm/futex.hpp"
#include "shm/process_slots.hpp"

namespace cushare::shim {
namespace detail {

constinit std::atomic<std::uint32_t> g_window{kWindowClosed};
constinit std::atomic<bool> g_pools_in_use{false};
constinit std::atomic<std::uint64_t> g_syncs_begun{0}, g_syncs_ended{0};
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

// The open window will measure nothing it can trust: nothing waits for it.
void spoil_window() noexcept {
  std::uint32_t open = kWindowOpen;
  if (g_window.compare_exchange_strong(open, kWindowSpoiled, std::memory_order_seq_cst))
    shm::futex_wake_all(g_window);
}
}  // namespace

void wait_for_window_to_close(std::atomic<std::uint64_t>& begun,
                              std::atomic<std::uint64_t>& ended) noexcept {
  // The measuring thread, and a call nested in one of this thread's own
  // (the window waits for the outer one anyway), go on.
  if (t_measuring || t_memory_ops > 1) return;
  // One bound for the whole wait, however many windows follow each other.
  const std::uint64_t deadline = shm::monotonic_ns() + kQuietWaitNs;
  for (;;) {
    ended.fetch_add(1, std::memory_order_seq_cst);  // not in flight meanwhile
    std::uint64_t now = shm::monotonic_ns();
    while (g_window.load(std::memory_order_seq_cst) == kWindowOpen && now < deadline) {
      shm::futex_wait(g_window, kWindowOpen, deadline - now);
      now = shm::monotonic_ns();
    }
    if (now >= deadline) spoil_window();  // held back as long as a measurement may wait
    begun.fetch_add(1, std::memory_order_seq_cst);
    if (g_window.load(std::memory_order_seq_cst) != kWindowOpen) return;
  }
}

}  // namespace detail

QuietWindow::QuietWindow(const AllocationState& st) noexcept : slot_(st.slot) {
  detail::t_measuring = true;
  detail::g_window.store(detail::kWindowOpen, std::memory_order_seq_cst);
  if (!slot_) return;
  const std::uint64_t own = detail::t_memory_ops;
  const std::uint64_t deadline = shm::monotonic_ns() + kQuietWaitNs;
  for (unsigned round = 0;; ++round) {
    // Synchronisations first, then memory calls: ended before begun in each.
    const std::uint64_t syncs_ended = detail::g_syncs_ended.load(std::memory_order_seq_cst);
    const std::uint64_t syncs = detail::g_syncs_begun.load(std::memory_order_seq_cst) - syncs_ended;
    if (syncs + shm::memory_ops_in_flight(*slot_) == own) {
      quiet_ = true;
      break;
    }
    if (shm::monotonic_ns() >= deadline) {
      detail::spoil_window();  // untrusted anyway: hold nothing back
      break;
    }
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
  detail::g_window.store(detail::kWindowClosed, std::memory_order_seq_cst);
  shm::futex_wake_all(detail::g_window);
  detail::t_measuring = false;
}

bool QuietWindow::quiet() const noexcept {
  return quiet_ && detail::g_window.load(std::memory_order_seq_cst) == detail::kWindowOpen;
}

void quiescence_reset_after_fork() noexcept {
  detail::g_window.store(detail::kWindowClosed, std::memory_order_relaxed);
  // Only the forking thread lives on, in no synchronisation of the parent's,
  // and the parent's pools are not the child's.
  detail::g_pools_in_use.store(false, std::memory_order_relaxed);
  detail::g_syncs_begun.store(0, std::memory_order_relaxed);
  detail::g_syncs_ended.store(0, std::memory_order_relaxed);
  detail::t_measuring = false;
}

}  // namespace cushare::shim
