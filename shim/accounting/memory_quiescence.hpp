// Quiet windows for the measured calls. A context creation, a module load
// and a primary context found made learn what they took by differencing two
// figures across the call: this process's device memory (NVML) and what it
// has charged. Every allocation, free, pool call and context destruction
// moves both figures, but not at the same instant: a charge goes up before
// the driver allocates and comes down after it frees. A call caught between
// its two steps reads as the measured call's own and makes the measurement
// low, an under-charge the quota then lets another allocation fill (a
// ground-truth overshoot of up to one allocation).
//
// So each hooked call that moves its charges is a MemoryOp, counted in the
// process's slot (memory_ops_begun / memory_ops_ended), and each
// measurement runs in a QuietWindow: new MemoryOps wait until the window
// closes (at most kQuietWaitNs: one that gives up spoils the window) and
// the ones in flight are waited for, up to kQuietWaitNs. A window that did
// not get quiet measures nothing it can trust: the caller keeps its
// reservation (or the larger figure) and learns nothing. What moves device
// memory without moving a charge is measured instead: a synchronisation
// gives pool memory back to the device, a graph launch grows the graph
// memory pool, so the samples read the pools' reservations too
// (context_overhead.hpp). Synchronisations, which wait for GPU work, are
// therefore not MemoryOps, and a busy process still gets quiet windows.
//
// The hot path of a MemoryOp is two atomic increments on the slot, one
// load of the window flag and a thread-local count: no lock, no syscall.
// The counters are in the slot so that the daemon, whose own overhead
// measurement has the same race, can skip a process with a memory call in
// flight (scheduler/daemon.cpp); an open window counts as one. They are the
// tenant's to write: a forged figure only spoils measurements of its own
// allocation.
#pragma once

#include <atomic>
#include <cstdint>

#include "shim/process/allocation_state.hpp"

namespace cushare::shim {

// How long a measurement waits for the memory calls in flight to end, and a
// memory call for a window to close.
inline constexpr std::uint64_t kQuietWaitNs = 200'000'000;

namespace detail {
extern constinit std::atomic<std::uint32_t> g_window_open;
extern constinit std::atomic<bool> g_window_spoiled;
extern __attribute__((tls_model("initial-exec"))) constinit thread_local std::uint32_t t_memory_ops;
void wait_for_window_to_close(shm::ProcessSlot& slot) noexcept;
}  // namespace detail

// Scope of one hooked call that moves this process's device memory or its
// charges. Null state (the shim passes calls through): nothing counted.
class MemoryOp {
 public:
  explicit MemoryOp(const AllocationState* st) noexcept : slot_(st ? st->slot : nullptr) {
    if (!slot_) return;
    ++detail::t_memory_ops;
    slot_->memory_ops_begun.fetch_add(1, std::memory_order_seq_cst);
    if (detail::g_window_open.load(std::memory_order_seq_cst)) [[unlikely]]
      detail::wait_for_window_to_close(*slot_);
  }
  ~MemoryOp() {
    if (!slot_) return;
    slot_->memory_ops_ended.fetch_add(1, std::memory_order_release);
    --detail::t_memory_ops;
  }
  MemoryOp(const MemoryOp&) = delete;
  MemoryOp& operator=(const MemoryOp&) = delete;

 private:
  shm::ProcessSlot* slot_;
};

// A measurement's window. The caller holds measurement_mutex() (one window
// at a time per process). The calling thread's own MemoryOps, if it is
// inside some, are not waited for, and it may start more inside the window.
class QuietWindow {
 public:
  explicit QuietWindow(const AllocationState& st) noexcept;
  ~QuietWindow();
  QuietWindow(const QuietWindow&) = delete;
  QuietWindow& operator=(const QuietWindow&) = delete;

  // Every other memory call of the process had ended when the window opened,
  // and none started since (none held back gave up waiting).
  bool quiet() const noexcept;

 private:
  shm::ProcessSlot* slot_;
  bool quiet_ = false;
};

// Fork child: only the forking thread exists, inside no window.
void quiescence_reset_after_fork() noexcept;

}  // namespace cushare::shim
