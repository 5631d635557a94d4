#include "shm/mapping_guard.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace cushare::shm {
namespace {

// Lock-free so the handler can read it: a slot is live while `base` != 0.
struct GuardSlot {
  std::atomic<std::uintptr_t> base{0};
  std::atomic<std::size_t> length{0};
  std::atomic<bool> claimed{false};
  std::atomic<bool> damaged{false};
};
std::array<GuardSlot, guard_detail::kMaxGuardedMappings> g_slots;
std::atomic<bool> g_installed{false};
std::uintptr_t g_page_size = 4096;
struct sigaction g_previous {};

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (auto& slot : g_slots) {
    const std::uintptr_t base = slot.base.load(std::memory_order_acquire);
    if (base == 0 || addr < base || addr - base >= slot.length.load(std::memory_order_relaxed))
      continue;
    const std::uintptr_t page = addr & ~(g_page_size - 1);
    void* zero = ::mmap(reinterpret_cast<void*>(page), g_page_size, PROT_READ | PROT_WRITE,
                        MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (zero == MAP_FAILED) break;  // cannot patch: fall through to the default
    slot.damaged.store(true, std::memory_order_release);
    return;  // the faulting access is retried on the zero page
  }
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  // Default action: returning re-executes the access, which faults again
  // with the default disposition and ends the process as without the guard.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
}

}  // namespace

void install_mapping_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page_size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous);
    g_installed.store(true, std::memory_order_release);
  });
}

bool mapping_guard_installed() noexcept {
  return g_installed.load(std::memory_order_acquire);
}

namespace guard_detail {

int register_mapping(const void* base, std::size_t length) noexcept {
  if (!mapping_guard_installed() || base == nullptr || length == 0) return -1;
  for (int i = 0; i < kMaxGuardedMappings; ++i) {
    GuardSlot& slot = g_slots[static_cast<std::size_t>(i)];
    bool expected = false;
    if (!slot.claimed.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
    slot.damaged.store(false, std::memory_order_relaxed);
    slot.length.store(length, std::memory_order_relaxed);
    slot.base.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_mapping(int token) noexcept {
  if (token < 0 || token >= kMaxGuardedMappings) return;
  GuardSlot& slot = g_slots[static_cast<std::size_t>(token)];
  slot.base.store(0, std::memory_order_release);
  slot.claimed.store(false, std::memory_order_release);
}

bool damaged(int token) noexcept {
  if (token < 0 || token >= kMaxGuardedMappings) return false;
  return g_slots[static_cast<std::size_t>(token)].damaged.load(std::memory_order_acquire);
}

}  // namespace guard_detail
}  // namespace cushare::shm
