// The launch gate (docs/scheduler.md, "Launch gate").
//
// Fast path, taken while this allocation holds the lease of the GPU (without
// a daemon: within the span of its last local go) and its queued work is short: a few relaxed
// atomic loads and one clock read (the time-stamp counter, see gate/clock.hpp), no lock, no
// syscall. Otherwise the slow path reads a snapshot, asks gate_decision.hpp what to do and does it:
// wait for the queued work to drain a little (so that no process stacks up work that would run far
// past its lease), or for a lease (publishing demand and sleeping on the shared lease futex of the
// limits region), or, without a live daemon, for the next slot of the local duty cycle of a
// capped allocation.
#include "shim/gate/launch_gate.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "shim/accounting/capture_tracker.hpp"
#include "shim/gate/clock.hpp"
#include "shim/gate/demand.hpp"
#include "shim/gate/duty_cycle_table.hpp"
#include "shim/gate/duty_neighbours.hpp"
#include "shim/gate/gate_decision.hpp"
#include "shim/gate/tracker.hpp"
#include "shim/process/allocation_state.hpp"
#include "shim/process/fork_reset.hpp"
#include "shm/clock.hpp"
#include "shm/futex.hpp"
#include "shm/limits_seqlock.hpp"
#include "shm/run_dir_layout.hpp"

namespace cushare::shim {
namespace {

using gate::GateAction;
using gate::GateSnapshot;
using gate::GateStep;
using shm::monotonic_ns;

// The launch between enter and exit (tracker null: not gated).
struct ThreadGate {
  gate::GpuTracker* tracker = nullptr;
  shm::GpuUsage* usage = nullptr;
  std::uint64_t now = 0;  // clock read at enter
  // The GPU whose borrow token this launch holds (g_borrowing), else kNoGpu.
  unsigned borrowing = kNoGpu;
};
// initial-exec: the shim is loaded at start-up (preload), so its TLS sits in
// the static block and is reached without a __tls_get_addr call per launch.
__attribute__((tls_model("initial-exec"))) thread_local ThreadGate t_gate;

std::once_flag g_fork_once;

// Per GPU: until when this process may launch without a daemon's lease (the
// slow path's last local go, gate_decision.hpp local_go_ns()); 0 while a
// daemon arbitrates. The fast path takes the later of the two expiries.
std::array<std::atomic<std::uint64_t>, shm::kMaxGpus> g_local_expiry{};

// Per GPU: a thread's borrowed launch (gate::GateStep::kBorrow) is between
// the decision and the tracker's count of it. Until it is counted the queue
// reads empty, and every thread woken by the same completion would borrow
// too: held, one launch at a time per process holds.
std::array<std::atomic<bool>, shm::kMaxGpus> g_borrowing{};

// Per GPU: a thread of this process waits for a grant on the CPU (the
// daemon's ready window): the others sleep on the futex as usual, so a
// process spends at most one CPU on it whatever its number of threads.
std::array<std::atomic<bool>, shm::kMaxGpus> g_ready_spinner{};

// Per GPU: the last decision ran the local duty cycle (capped, no daemon
// arbitrating), the only reader of a spell's wait for the GPU; spells start
// with the tracker's start probe only then, since it costs a context lookup
// and an event record at every spell start (every launch of a loop that
// synchronises after each kernel).
std::array<std::atomic<bool>, shm::kMaxGpus> g_local_duty{};

[[gnu::always_inline]] inline std::uint64_t lease_word(const AllocationState& st,
                                                       unsigned gpu) noexcept {
  return st.limits->gpus[gpu].lease_expiry_ns.load(std::memory_order_relaxed);
}
[[gnu::always_inline]] inline std::uint64_t expiry_of(std::uint64_t lease, unsigned gpu) noexcept {
  return std::max(lease, g_local_expiry[gpu].load(std::memory_order_relaxed));
}

unsigned gpu_of_launch(const AllocationState& st) noexcept {
  // One visible device (the usual container) needs no driver call.
  if (st.device_count == 1) return st.gpu_of_device[0];
  return current_gpu_index(st);
}

// Whether a launch may go now while holding a lease that expires at `expiry`
// (the estimate is read only when asked: it is on the fast path).
[[gnu::always_inline]] inline bool queue_allows(std::uint64_t now, std::uint64_t expiry,
                                                const gate::GpuTracker& tr) noexcept {
  const std::uint64_t horizon = gate::queue_horizon_ns(now, expiry);
  return gate::queue_allows(now, expiry, tr.queued_estimate_ns(now, horizon), horizon);
}

// Per GPU, for the local duty cycle: when the slot last opened, as this
// process last looked, and the allocation's idle time up to then
// (GpuTracker::idle_until_ns). Racing threads store equal values.
struct SlotBase {
  std::atomic<std::uint64_t> open_ns{0};
  std::atomic<std::uint64_t> idle_ns{0};
};
std::array<SlotBase, shm::kMaxGpus> g_slot_base{};

// The allocation's busy time since its slot opened at `open`: the time
// since, less the idle time the tracker saw in it (its idle gaps, and its
// spells' waits for the GPU while another context ran: spell_wait.hpp).
std::uint64_t busy_since(gate::GpuTracker& tr, unsigned gpu, std::uint64_t open,
                         std::uint64_t now) noexcept {
  SlotBase& b = g_slot_base[gpu];
  if (b.open_ns.load(std::memory_order_acquire) != open) {
    b.idle_ns.store(tr.idle_at_period_start_ns(open), std::memory_order_relaxed);
    b.open_ns.store(open, std::memory_order_release);
  }
  const std::uint64_t at_open = b.idle_ns.load(std::memory_order_relaxed);
  const std::uint64_t idle_now = tr.idle_until_ns(now);
  const std::uint64_t idle = idle_now > at_open ? idle_now - at_open : 0;
  const std::uint64_t wall = now > open ? now - open : 0;
  return wall > idle ? wall - idle : 0;
}

// Whether a launch fits the daemon's lease word `lease` if it is a live cut
// one (one that ran out, from a daemon gone since, weighs nothing).
std::uint64_t cut_figure_ns(const gate::GpuTracker& tr, const shm::GpuUsage& gu) noexcept {
  return gate::cut_per_launch_ns(tr.own_per_launch_ns(),
                                 gu.busy_processes.load(std::memory_order_relaxed), tr.busy());
}

bool fits_cut_lease(std::uint64_t now, std::uint64_t lease, const gate::GpuTracker& tr,
                    const shm::GpuUsage& gu) noexcept {
  if (!(lease & shm::kLeaseCutBit) || now >= lease) return true;
  const std::uint64_t queued = tr.queued_estimate_ns(now, gate::queue_horizon_ns(now, lease));
  return gate::cut_lease_allows(now, lease, queued, cut_figure_ns(tr, gu));
}

std::uint64_t pack(DutySlot s) noexcept {
  return (std::uint64_t{s.offset_ppm} << 32) | s.length_ppm;
}
DutySlot unpack(std::uint64_t v) noexcept {
  return {.offset_ppm = static_cast<std::uint32_t>(v >> 32),
          .length_ppm = static_cast<std::uint32_t>(v)};
}

// The allocation's limits and standing as the local duty cycle sees them.
// The slot comes from the node's table (I/O), refreshed at most every
// kDutyRefreshNs per GPU; all processes of an allocation share the phase,
// since it derives from CLOCK_MONOTONIC.
gate::DutyCycleView duty_cycle_view(const AllocationState& st, unsigned gpu, gate::GpuTracker& tr,
                                    std::uint64_t now) noexcept {
  const auto& g = st.limits->gpus[gpu];
  if (static_cast<shm::ComputeMode>(g.mode.load(std::memory_order_relaxed)) !=
      shm::ComputeMode::kCapped) {
    return {};
  }
  const std::uint32_t pct = std::clamp<std::uint32_t>(g.compute_limit_pct.load(), 1, 100);
  static std::array<std::atomic<std::uint64_t>, shm::kMaxGpus> refreshed{};
  static std::array<std::atomic<std::uint64_t>, shm::kMaxGpus> slots{};
  if (now >= refreshed[gpu].load(std::memory_order_relaxed) + kDutyRefreshNs) {
    refreshed[gpu].store(now, std::memory_order_relaxed);
    std::string uuid(g.uuid, strnlen(g.uuid, shm::kUuidBytes));
    // A "*" entry claims the GPU it runs on, beside the allocations on its UUID.
    CUdevice device = -1;
    if (uuid == shm::kAnyGpu && current_gpu_index(st, device) == gpu && device >= 0 &&
        static_cast<std::size_t>(device) < st.device_uuid.size())
      uuid = st.device_uuid[static_cast<std::size_t>(device)];
    std::vector<DutyNeighbour> neighbours;
    const DutySlot slot = duty_slot_for(st.run_dir, uuid, gpu, pct, now, &neighbours);
    slots[gpu].store(pack(slot), std::memory_order_relaxed);
    set_duty_neighbours(gpu, st.run_dir, neighbours);
  }
  gate::DutyCycleView v{.capped = true,
                        .quantum_ns = st.limits->quantum_ns.load(std::memory_order_relaxed),
                        .limit_pct = pct,
                        .slot = unpack(slots[gpu].load(std::memory_order_relaxed))};
  const DutyPosition at = duty_position(now, gate::duty_cycle_period_ns(v), v.slot);
  v.busy_ns = busy_since(tr, gpu, at.open_ns, now);
  return v;
}

// Whether the node run dir this allocation lives in (RUN/alloc/<id>) holds a
// daemon's control socket (RUN/cushared.sock). Looked up once per process.
bool node_has_daemon_socket(const AllocationState& st) noexcept {
  static std::atomic<int> cached{-1};
  int v = cached.load(std::memory_order_acquire);
  if (v >= 0) return v == 1;
  v = 0;
  try {
    const std::filesystem::path folder(st.run_dir);
    if (folder.parent_path().filename() == shm::kAllocDirName) {
      struct stat sb {};
      const auto sock = folder.parent_path().parent_path() / shm::kSocketName;
      v = ::stat(sock.c_str(), &sb) == 0 && S_ISSOCK(sb.st_mode) ? 1 : 0;
    }
  } catch (...) {
    v = 0;
  }
  cached.store(v, std::memory_order_release);
  return v == 1;
}

// When this process first found the limits region unticked (heartbeat 0)
// in a node run dir served by a daemon; 0 when no daemon serves it. A new
// region may just not be discovered yet, and the wait for its first
// heartbeat is counted from here (gate_decision.hpp).
std::uint64_t unticked_since(const AllocationState& st, std::uint64_t now) noexcept {
  static std::atomic<std::uint64_t> first_seen{0};
  if (!node_has_daemon_socket(st)) return 0;
  std::uint64_t since = first_seen.load(std::memory_order_relaxed);
  if (since == 0) {
    first_seen.compare_exchange_strong(since, now, std::memory_order_relaxed);
    since = first_seen.load(std::memory_order_relaxed);
  }
  return since;
}

// Reads what decide_gate() looks at. The run-dir lookups (the daemon's
// socket, the duty-cycle table) happen only where the decision needs them.
GateSnapshot read_snapshot(const AllocationState& st, unsigned gpu, gate::GpuTracker& tr) noexcept {
  GateSnapshot s{.now = monotonic_ns()};
  s.lease_expiry_ns = st.limits->gpus[gpu].lease_expiry_ns.load(std::memory_order_acquire);
  s.lease_cut = (s.lease_expiry_ns & shm::kLeaseCutBit) != 0;
  s.heartbeat_ns = st.limits->daemon_heartbeat_ns.load(std::memory_order_acquire);
  if (s.heartbeat_ns == 0) s.unticked_since_ns = unticked_since(st, s.now);
  const bool arbitrated = gate::daemon_arbitrates(s);
  if (arbitrated) s.horizon_ns = gate::queue_horizon_ns(s.now, s.lease_expiry_ns);
  s.queued_ns = tr.queued_estimate_ns(s.now, s.horizon_ns);
  s.per_launch_ns = tr.per_launch_ns();
  if (s.lease_cut) s.cut_per_launch_ns = cut_figure_ns(tr, st.usage->gpus[gpu]);
  if (!arbitrated) {
    s.duty = duty_cycle_view(st, gpu, tr, s.now);
    // Only a borrower with nothing queued looks (decide_gate() waits for its
    // queue first).
    if (s.queued_ns == 0 && gate::duty_cycle_may_borrow(s))
      s.duty.neighbours = duty_neighbours(gpu);
  }
  return s;
}

void sleep_ns(std::uint64_t ns) noexcept {
  timespec ts{.tv_sec = static_cast<time_t>(ns / 1'000'000'000),
              .tv_nsec = static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

// Waits on the CPU while `word` holds `seen` and the daemon's ready word
// keeps `bit`, for at most `ns`; returns how long.
std::uint64_t spin_while_unchanged(const std::atomic<std::uint32_t>& word, std::uint32_t seen,
                                   const std::atomic<std::uint32_t>& ready, std::uint32_t bit,
                                   std::uint64_t ns) noexcept {
  const std::uint64_t start = monotonic_ns();
  std::uint64_t now = start;
  while (word.load(std::memory_order_acquire) == seen &&
         (ready.load(std::memory_order_relaxed) & bit) != 0 && now < start + ns) {
    for (int i = 0; i < 16; ++i) shm::detail::cpu_relax();
    now = monotonic_ns();
  }
  return now - start;
}

void reset_gate_after_fork() noexcept {
  for (auto& e : g_local_expiry) e.store(0, std::memory_order_relaxed);
  for (auto& b : g_borrowing) b.store(false, std::memory_order_relaxed);
  for (auto& r : g_ready_spinner) r.store(false, std::memory_order_relaxed);
  for (auto& d : g_local_duty) d.store(false, std::memory_order_relaxed);
  for (auto& b : g_slot_base) b.open_ns.store(0, std::memory_order_relaxed);
  gate::reset_trackers_after_fork();
  gate::reset_demand_after_fork();
}

CUresult slow_path(const AllocationState& st, unsigned gpu, CUstream stream) noexcept {
  std::call_once(g_fork_once, [] {
    on_fork(ForkStage::kGate, reset_gate_after_fork);
    on_fork(ForkStage::kGate, duty_neighbours_after_fork_child, duty_neighbours_before_fork,
            duty_neighbours_after_fork_parent);
  });
  const shm::LimitsRegion& limits = *st.limits;
  const shm::GpuLimits& gl = limits.gpus[gpu];
  shm::GpuUsage& gu = st.usage->gpus[gpu];
  gate::GpuTracker& tr = gate::tracker(gpu);
  const std::uint64_t start = monotonic_ns();
  // A thread held here wants the GPU, whatever it waits for: counted in
  // `demand` from the first wait on, so the daemon neither takes an idle
  // lease back from its allocation (queue drained, the thread not woken yet)
  // nor, once the lease has passed on, sees the allocation without demand
  // for a moment and levels its virtual time as if it came back from idle.
  gate::DemandCount demand(gpu, gu);
  bool asked = false;      // waited for a lease
  std::uint64_t spun = 0;  // of it on the CPU (gate::ready_spin_ns)
  bool throttled = false;
  for (bool go = false; !go;) {
    const GateSnapshot snap = read_snapshot(st, gpu, tr);
    g_local_duty[gpu].store(snap.duty.capped, std::memory_order_relaxed);  // read only unarbitrated
    const GateAction action = gate::decide_gate(snap);
    if (action.step == GateStep::kGo) {
      g_local_expiry[gpu].store(action.ns != 0 ? snap.now + action.ns : 0,
                                std::memory_order_relaxed);
      break;
    }
    if (action.step == GateStep::kBorrow) {
      bool free = false;
      if (g_borrowing[gpu].compare_exchange_strong(free, true, std::memory_order_acquire)) {
        t_gate.borrowing = gpu;  // given back once the tracker counts the launch
        g_local_expiry[gpu].store(0, std::memory_order_relaxed);
        break;
      }
    }
    demand.count();
    switch (action.step) {
      case GateStep::kWaitForProgress:
        // Its stream idle, or short, beside a batch of other streams:
        // it starts at once, whatever the estimate says of the others (the
        // queue bound only, with room for it in the lease).
        if (tr.wait_for_progress(stream, action.ns, action.beside_ns, gu)) {
          g_local_expiry[gpu].store(0, std::memory_order_relaxed);
          go = true;
        }
        break;
      case GateStep::kSleep:
        throttled = true;
        tr.record_own_tail();
        sleep_ns(action.ns);
        break;
      case GateStep::kWaitForLease: {
        asked = true;
        throttled = true;
        tr.record_own_tail();
        // The word first, then the expiry again: a grant between the
        // snapshot and the wait changes the word, so it is never slept
        // through.
        const std::uint32_t seen = gl.lease_futex.load(std::memory_order_acquire);
        if (snap.now < gl.lease_expiry_ns.load(std::memory_order_acquire)) break;
        const std::uint32_t ready_gpus = limits.ready_gpus.load(std::memory_order_acquire);
        const std::uint64_t spin = gate::ready_spin_ns(
            snap.now, limits.ready_until_ns.load(std::memory_order_relaxed), ready_gpus, gpu, spun);
        if (spin != 0 && !g_ready_spinner[gpu].exchange(true, std::memory_order_acquire)) {
          spun += spin_while_unchanged(gl.lease_futex, seen, limits.ready_gpus, 1u << gpu, spin);
          g_ready_spinner[gpu].store(false, std::memory_order_release);
        } else {
          shm::futex_wait(gl.lease_futex, seen, action.ns);
        }
        break;
      }
      case GateStep::kWaitForNextLease: {
        asked = true;
        throttled = true;
        tr.record_own_tail();
        const std::uint32_t seen = gl.lease_futex.load(std::memory_order_acquire);
        if (gl.lease_expiry_ns.load(std::memory_order_acquire) != snap.lease_expiry_ns) break;
        shm::futex_wait(gl.lease_futex, seen, action.ns);
        break;
      }
      case GateStep::kBorrow:  // another thread's borrowed launch goes first
        sleep_ns(gate::kBorrowPollNs);
        break;
      case GateStep::kGo:
        break;
    }
  }
  demand.release();
  if (asked) {
    // Went on under a lease it had to wait for: the first thread to do so
    // after the grant stamps the time (one that began waiting after an
    // earlier stamp is not the first).
    const std::uint64_t resumed = monotonic_ns();
    std::uint64_t prev = gu.resumed_ns.load(std::memory_order_relaxed);
    while (prev < start &&
           !gu.resumed_ns.compare_exchange_weak(prev, resumed, std::memory_order_release,
                                                std::memory_order_relaxed)) {
    }
  }
  if (throttled) {
    gu.throttled_launches.fetch_add(1, std::memory_order_relaxed);
    gu.throttled_ns.fetch_add(monotonic_ns() - start, std::memory_order_relaxed);
  }
  t_gate.now = monotonic_ns();
  return CUDA_SUCCESS;
}

// Everything but the fast path, kept out of line so that the fast path stays
// a leaf with a small frame.
[[gnu::noinline, gnu::cold]] CUresult enter_slow(const AllocationState& st, unsigned gpu,
                                                 CUstream stream, gate::GpuTracker& tr) noexcept {
  const std::uint64_t now = t_gate.now;
  const std::uint64_t lease = lease_word(st, gpu);
  const std::uint64_t expiry = expiry_of(lease, gpu);
  if (!(now < expiry && queue_allows(now, expiry, tr) &&
        fits_cut_lease(now, lease, tr, st.usage->gpus[gpu]))) {
    if (const CUresult rc = slow_path(st, gpu, stream); rc != CUDA_SUCCESS) return rc;
  }
  if (!tr.busy()) {
    // First launch after an idle spell: count this process busy before the
    // work exists, and stamp the launch after that (on the clock the other
    // processes' pollers publish drain marks with), so no other process of
    // the allocation can declare the queue drained past it. The gap since
    // the last spell is measured here too (idle time is not charged).
    tr.begin_spell(stream, st.usage->gpus[gpu], g_local_duty[gpu].load(std::memory_order_relaxed));
    t_gate.now = monotonic_ns();
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult launch_gate_enter(CUstream stream) noexcept {
  t_gate.tracker = nullptr;
  const AllocationState* st = allocation_state();
  if (!st) [[unlikely]] {
    // Not initialised yet (the launch will fail or initialise), disabled, or
    // failed: the hooks forward; quotas of a failed shim are refused elsewhere.
    return CUDA_SUCCESS;
  }
  // Work captured into a graph runs when the graph is launched, and that
  // launch passes the gate. The capture queues nothing on the GPU: never
  // held, never counted (a count that no batch can complete would read as a
  // queue that never drains, and hold every later launch).
  if (stream_is_capturing(stream)) [[unlikely]]
    return CUDA_SUCCESS;
  const unsigned gpu = gpu_of_launch(*st);
  if (gpu >= shm::kMaxGpus) return CUDA_SUCCESS;  // a device outside the allocation
  gate::GpuTracker& tr = gate::tracker(gpu);
  const std::uint64_t now = gate::gate_now_ns();
  t_gate = {.tracker = &tr, .usage = &st->usage->gpus[gpu], .now = now};
  const std::uint64_t lease = lease_word(*st, gpu);
  const std::uint64_t expiry = expiry_of(lease, gpu);
  // A live cut lease (rare: another tenant is away for a moment) weighs
  // each launch in enter_slow().
  if (now < expiry && (!(lease & shm::kLeaseCutBit) || now >= lease) &&
      queue_allows(now, expiry, tr) && tr.busy()) [[likely]] {
    return CUDA_SUCCESS;
  }
  return enter_slow(*st, gpu, stream, tr);
}

std::uint64_t launch_gate_thread_last_launch_ns() noexcept {
  return t_gate.now;
}

void launch_gate_exit(CUstream stream, CUresult launch_result) noexcept {
  gate::GpuTracker* tr = t_gate.tracker;
  if (!tr) return;
  if (launch_result != CUDA_SUCCESS) [[unlikely]] {
    // Nothing was queued: a busy mark this launch set must not stay behind.
    tr->launch_failed();
  } else {
    shm::GpuUsage& gu = *t_gate.usage;
    gu.last_submit_ns.store(t_gate.now, std::memory_order_release);
    // The launch counter and expected_drain_ns are published per batch (see
    // GpuTracker::record_locked), keeping shared cache lines off the fast path.
    tr->on_launch(stream, t_gate.now, gu);
  }
  if (t_gate.borrowing != kNoGpu) [[unlikely]] {
    g_borrowing[t_gate.borrowing].store(false, std::memory_order_release);
    t_gate.borrowing = kNoGpu;
  }
}

}  // namespace cushare::shim
