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
// closes (at most kQuietWaitNs in all: one that gives up spoils the window,
// and nothing waits for a spoiled one) and the ones in flight are waited
// for, up to kQuietWaitNs. A window that did not get quiet measures nothing
// it can trust: the caller keeps its reservation (or the larger figure) and
// learns nothing. What moves device memory without moving a charge is
// read instead: a graph launch grows the graph memory pool, a
// synchronisation gives pool memory back, so the samples read the pools'
// reservations too (context_overhead.hpp). A synchronisation is held back
// as well (SyncOp) once the process has used pools, since a trim half done
// reads wrong whatever is sampled; in a process without pools it is not,
// and a busy process's windows do not wait for its GPU work.
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
// The process's measurement window: closed, open (memory calls wait), or
// spoiled (open, but a call gave up waiting or the calls in flight never
// ended: nothing waits for it any more).
inline constexpr std::uint32_t kWindowClosed = 0, kWindowOpen = 1, kWindowSpoiled = 2;
extern constinit std::atomic<std::uint32_t> g_window;
extern __attribute__((tls_model("initial-exec"))) constinit thread_local std::uint32_t t_memory_ops;
// Synchronisations of a process that uses memory pools (SyncOp), counted
// here: the daemon does not wait for them.
extern constinit std::atomic<bool> g_pools_in_use;
extern constinit std::atomic<std::uint64_t> g_syncs_begun, g_syncs_ended;
void wait_for_window_to_close(std::atomic<std::uint64_t>& begun,
                              std::atomic<std::uint64_t>& ended) noexcept;
}  // namespace detail

// Scope of one hooked call that moves this process's device memory or its
// charges. Null state (the shim passes calls through): nothing counted.
class MemoryOp {
 public:
  explicit MemoryOp(const AllocationState* st) noexcept : slot_(st ? st->slot : nullptr) {
    if (!slot_) return;
    ++detail::t_memory_ops;
    slot_->memory_ops_begun.fetch_add(1, std::memory_order_seq_cst);
    if (detail::g_window.load(std::memory_order_seq_cst) == detail::kWindowOpen) [[unlikely]]
      detail::wait_for_window_to_close(slot_->memory_ops_begun, slot_->memory_ops_ended);
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

// Scope of a synchronisation (the application's, or the launch gate's own
// event waits) in a process that has used memory pools: where a pool gives
// what it caches above its release threshold back to the device. A driver
// may drop a pool's reservation and its device memory at different moments,
// so no sample can tell a trim half done: windows hold synchronisations
// back too. A process without pools has nothing to trim, and its windows do
// not wait for its GPU work.
class SyncOp {
 public:
  SyncOp() noexcept : counted_(detail::g_pools_in_use.load(std::memory_order_acquire)) {
    if (!counted_) return;
    ++detail::t_memory_ops;
    detail::g_syncs_begun.fetch_add(1, std::memory_order_seq_cst);
    if (detail::g_window.load(std::memory_order_seq_cst) == detail::kWindowOpen) [[unlikely]]
      detail::wait_for_window_to_close(detail::g_syncs_begun, detail::g_syncs_ended);
  }
  ~SyncOp() {
    if (!counted_) return;
    detail::g_syncs_ended.fetch_add(1, std::memory_order_release);
    --detail::t_memory_ops;
  }
  SyncOp(const SyncOp&) = delete;
  SyncOp& operator=(const SyncOp&) = delete;

 private:
  bool counted_;
};

// The process allocated from a memory pool: its synchronisations count from now on.
inline void note_pools_in_use() noexcept {
  if (!detail::g_pools_in_use.load(std::memory_order_relaxed))
    detail::g_pools_in_use.store(true, std::memory_order_seq_cst);
}

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
