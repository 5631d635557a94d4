// Consistent reads and live updates of the per-GPU quota fields of the
// `limits` region, through the seqlock on LimitsRegion::generation
// (odd = a writer is between its two increments).
//
// Readers (shims, every cuMemAlloc) never block a writer and never take a
// lock: they retry while the generation is odd or changed under them. A
// writer that died mid-update (or is preempted for long) leaves the
// generation odd; readers then give up after a bounded wait and return the
// current field values with consistent = false (each field is atomic and was
// written by an authorised writer, so a value is never garbage, only possibly
// a mix of old and new fields), and the next writer takes over.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

#include "shm/clock.hpp"
#include "shm/layout.hpp"

namespace cushare::shm {

struct GpuLimitsSnapshot {
  std::uint64_t memory_limit_bytes = kUnlimited;
  std::uint32_t compute_limit_pct = 100;
  std::uint32_t weight = 100;
  ComputeMode mode = ComputeMode::kBurst;
  std::uint64_t generation = 0;  // even generation the snapshot was read at (output only)
  bool consistent = true;        // false only after a writer died mid-update (output only)
};

// How long a reader waits on an odd generation before it falls back to an
// unguarded read, and how long a writer waits before it concludes that the
// writer holding the generation died and takes over. A live writer holds it
// for four stores unless it is preempted, which on a loaded node can last a
// few scheduler slices; a reader waits about that long (the fallback values
// are legitimate per field, and a dead writer must not make every allocation
// slow); the takeover bound is far longer, because
// taking over from a writer that is merely slow could let a reader combine
// fields of both updates. Waiting starts with a short pause-spin; only then
// does it read the clock (vDSO, no syscall) and yield the CPU, so the common
// case (generation even) costs two loads.
inline constexpr std::uint64_t kSeqlockReaderWaitNs = 10'000'000;   // 10 ms
inline constexpr std::uint64_t kSeqlockTakeoverNs = 2'000'000'000;  // 2 s
inline constexpr unsigned kSeqlockPauseSpins = 1024;

namespace detail {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Waits one step on an odd generation; false once `limit_ns` has passed
// since the first slow step.
class OddWait {
 public:
  explicit OddWait(std::uint64_t limit_ns) : limit_ns_(limit_ns) {}
  bool step() {
    if (spins_ < kSeqlockPauseSpins) {
      ++spins_;
      cpu_relax();
      return true;
    }
    const std::uint64_t now = monotonic_ns();
    if (since_ == 0) since_ = now;
    if (now - since_ >= limit_ns_) return false;
    sched_yield();  // let a preempted writer run
    return true;
  }

 private:
  std::uint64_t limit_ns_;
  unsigned spins_ = 0;
  std::uint64_t since_ = 0;
};

// Acquire loads: a later generation re-check cannot move before them, and a
// field written by a writer (release store) makes its odd generation visible.
// (Written without atomic_thread_fence, which ThreadSanitizer does not model;
// on x86 these are plain loads either way.)
inline GpuLimitsSnapshot load_fields(const GpuLimits& g) {
  GpuLimitsSnapshot s;
  s.memory_limit_bytes = g.memory_limit_bytes.load(std::memory_order_acquire);
  s.compute_limit_pct = g.compute_limit_pct.load(std::memory_order_acquire);
  s.weight = g.weight.load(std::memory_order_acquire);
  s.mode = static_cast<ComputeMode>(g.mode.load(std::memory_order_acquire));
  return s;
}
}  // namespace detail

// Precondition: gpu < kMaxGpus. Lock-free; no syscall unless a writer is
// mid-update.
inline GpuLimitsSnapshot read_gpu_limits(const LimitsRegion& limits, unsigned gpu) {
  const GpuLimits& g = limits.gpus[gpu];
  detail::OddWait wait(kSeqlockReaderWaitNs);
  for (;;) {
    const std::uint64_t g1 = limits.generation.load(std::memory_order_acquire);
    if (g1 & 1u) {
      if (!wait.step()) {
        GpuLimitsSnapshot s = detail::load_fields(g);
        s.generation = g1;
        s.consistent = false;
        return s;
      }
      continue;
    }
    GpuLimitsSnapshot s = detail::load_fields(g);
    if (limits.generation.load(std::memory_order_relaxed) == g1) {
      s.generation = g1;
      return s;
    }
  }
}

// Writer side (daemon, device plugin, standalone creator). Writers serialise
// among themselves by CAS on the generation (even -> odd). A generation that
// stays odd for kSeqlockTakeoverNs belongs to a writer that died: this writer
// takes it over (odd -> odd + 2). A writer ends with a CAS odd -> even, so one
// that was taken over never moves the generation backwards.
// `value.generation` and `value.consistent` are ignored. Returns the
// generation after the update.
inline std::uint64_t update_gpu_limits(LimitsRegion& limits, unsigned gpu,
                                       const GpuLimitsSnapshot& value) {
  std::uint64_t cur = limits.generation.load(std::memory_order_relaxed);
  detail::OddWait wait(kSeqlockTakeoverNs);
  std::uint64_t odd;
  for (;;) {
    if (cur & 1u) {
      if (wait.step()) {
        cur = limits.generation.load(std::memory_order_relaxed);
        continue;
      }
      odd = cur + 2;  // take over from a dead writer; stays odd
    } else {
      odd = cur + 1;
    }
    if (limits.generation.compare_exchange_weak(cur, odd, std::memory_order_relaxed)) break;
  }
  // Release stores: a reader that sees any new field also sees the odd
  // generation stored before it, and so retries.
  GpuLimits& g = limits.gpus[gpu];
  g.memory_limit_bytes.store(value.memory_limit_bytes, std::memory_order_release);
  g.compute_limit_pct.store(value.compute_limit_pct, std::memory_order_release);
  g.weight.store(value.weight, std::memory_order_release);
  g.mode.store(static_cast<std::uint32_t>(value.mode), std::memory_order_release);
  std::uint64_t expected = odd;
  if (limits.generation.compare_exchange_strong(expected, odd + 1, std::memory_order_release,
                                                std::memory_order_relaxed))
    return odd + 1;
  return expected;  // taken over while stalled: the taker publishes
}

// Initialises entry `gpu` (uuid and quota fields) of a region being created,
// before its magic is published; bumps gpu_count to cover it. Not for live
// regions: a UUID is immutable once published. Precondition: gpu < kMaxGpus.
void init_gpu_entry(LimitsRegion& limits, unsigned gpu, std::string_view uuid,
                    const GpuLimitsSnapshot& value);

// Index of the entry whose uuid equals `uuid`, else of the kAnyGpu ("*")
// entry, else nullopt. Looks at the first gpu_count entries (clamped to
// kMaxGpus).
std::optional<unsigned> find_gpu_entry(const LimitsRegion& limits, std::string_view uuid);

}  // namespace cushare::shm
