#include "shim/process/fork_reset.hpp"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>

namespace cushare::shim {
namespace {

struct Registration {
  ForkStage stage = ForkStage::kAccounting;
  ForkHandler child = nullptr;
  ForkHandler prepare = nullptr;
  ForkHandler parent = nullptr;
  std::atomic<bool> ready{false};  // published after the fields above
};

// A handful of parts register; a fixed array needs no allocation. No lock:
// parts register while holding locks of their own (initialisation does) that
// their prepare handlers take, so a registry lock held across the fork would
// order against them both ways.
constexpr std::size_t kMaxRegistrations = 8;
constinit std::array<Registration, kMaxRegistrations> g_entries;
constinit std::atomic<std::size_t> g_claimed{0};

constexpr ForkStage kStages[] = {ForkStage::kAccounting, ForkStage::kGate, ForkStage::kAllocation};

template <class Each>
void in_stage_order(bool reverse, Each&& each) {
  const std::size_t n = std::min(g_claimed.load(std::memory_order_acquire), kMaxRegistrations);
  for (std::size_t s = 0; s < std::size(kStages); ++s) {
    const ForkStage stage = kStages[reverse ? std::size(kStages) - 1 - s : s];
    for (std::size_t k = 0; k < n; ++k) {
      const Registration& e = g_entries[reverse ? n - 1 - k : k];
      // One registering while the process forks is left out of this fork.
      if (e.ready.load(std::memory_order_acquire) && e.stage == stage) each(e);
    }
  }
}

void prepare_all() {
  in_stage_order(true, [](const Registration& e) {
    if (e.prepare) e.prepare();
  });
}

void parent_all() {
  in_stage_order(false, [](const Registration& e) {
    if (e.parent) e.parent();
  });
}

void child_all() {
  in_stage_order(false, [](const Registration& e) { e.child(); });
}

}  // namespace

void on_fork(ForkStage stage, ForkHandler child, ForkHandler prepare, ForkHandler parent) noexcept {
  static std::once_flag installed;
  std::call_once(installed, [] { pthread_atfork(prepare_all, parent_all, child_all); });
  const std::size_t n = std::min(g_claimed.load(std::memory_order_acquire), kMaxRegistrations);
  for (std::size_t k = 0; k < n; ++k) {
    const Registration& e = g_entries[k];
    if (e.ready.load(std::memory_order_acquire) && e.stage == stage && e.child == child &&
        e.prepare == prepare && e.parent == parent)
      return;
  }
  const std::size_t slot = g_claimed.fetch_add(1, std::memory_order_acq_rel);
  // More parts than slots is a programming error: a child that kept its
  // parent's charges would return them twice. The fork tests meet it at once.
  if (slot >= kMaxRegistrations) __builtin_trap();
  Registration& e = g_entries[slot];
  e.stage = stage;
  e.child = child;
  e.prepare = prepare;
  e.parent = parent;
  e.ready.store(true, std::memory_order_release);
}

}  // namespace cushare::shim
