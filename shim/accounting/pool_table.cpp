#include "shim/accounting/pool_table.hpp"

namespace cushare::shim {
namespace {

constexpr unsigned kHintBits = 9;  // twice as many hints as records: few collisions

constinit PoolRecord g_pools[kMaxPools];
// Record index + 1 of the pool last found through each hint (0: none). A
// hint is only ever a guess, checked against the record's key.
constinit std::atomic<std::uint16_t> g_hints[1u << kHintBits];
// Serialises additions, so that a pool never gets two records.
constinit std::atomic<bool> g_adding{false};

struct AddGuard {
  AddGuard() noexcept {
    while (g_adding.exchange(true, std::memory_order_acquire)) {
    }
  }
  ~AddGuard() { g_adding.store(false, std::memory_order_release); }
  AddGuard(const AddGuard&) = delete;
  AddGuard& operator=(const AddGuard&) = delete;
};

std::uintptr_t key_of(CUmemoryPool pool) {
  return reinterpret_cast<std::uintptr_t>(pool);
}

std::atomic<std::uint16_t>& hint_of(std::uintptr_t key) {
  return g_hints[(key >> 4) * 0x9E3779B97F4A7C15ull >> (64 - kHintBits)];
}

unsigned find_key(std::uintptr_t key) noexcept {
  auto& hint = hint_of(key);
  if (const unsigned h = hint.load(std::memory_order_relaxed);
      h && g_pools[h - 1].key.load(std::memory_order_acquire) == key)
    return h - 1;
  for (unsigned i = 0; i < kMaxPools; ++i) {
    if (g_pools[i].key.load(std::memory_order_acquire) == key) {
      hint.store(static_cast<std::uint16_t>(i + 1), std::memory_order_relaxed);
      return i;
    }
  }
  return kNoPool;
}

}  // namespace

PoolRecord& pool_record(unsigned index) noexcept {
  return g_pools[index];
}

unsigned find_pool(CUmemoryPool pool) noexcept {
  const auto key = key_of(pool);
  return key > PoolRecord::kRetiredKey ? find_key(key) : kNoPool;
}

unsigned find_or_add_pool(CUmemoryPool pool, unsigned gpu) noexcept {
  const auto key = key_of(pool);
  if (key <= PoolRecord::kRetiredKey) return kNoPool;
  if (const unsigned i = find_key(key); i != kNoPool) return i;
  AddGuard guard;
  if (const unsigned i = find_key(key); i != kNoPool) return i;  // added meanwhile
  for (unsigned i = 0; i < kMaxPools; ++i) {
    auto& rec = g_pools[i];
    if (rec.key.load(std::memory_order_acquire) != 0) continue;
    // Free records are taken only here, under the guard: this one stays free.
    // `inflight` is left alone: a stale lookup may still count on it.
    rec.lock();
    rec.gpu = static_cast<std::uint8_t>(gpu);
    rec.charged = 0;
    rec.outstanding = 0;
    rec.key.store(key, std::memory_order_release);
    rec.unlock();
    hint_of(key).store(static_cast<std::uint16_t>(i + 1), std::memory_order_relaxed);
    return i;
  }
  return kNoPool;
}

bool retired_and_unused_locked(const PoolRecord& rec) noexcept {
  return rec.key.load(std::memory_order_relaxed) == PoolRecord::kRetiredKey &&
         rec.outstanding == 0 && rec.inflight.load(std::memory_order_acquire) == 0;
}

void free_pool_record_locked(PoolRecord& rec) noexcept {
  rec.charged = 0;
  rec.outstanding = 0;
  rec.key.store(0, std::memory_order_release);
}

void pool_table_reset_after_fork() noexcept {
  for (auto& rec : g_pools) {
    rec.key.store(0, std::memory_order_relaxed);
    rec.locked.store(false, std::memory_order_relaxed);
    rec.inflight.store(0, std::memory_order_relaxed);
    rec.charged = 0;
    rec.outstanding = 0;
  }
  for (auto& hint : g_hints) hint.store(0, std::memory_order_relaxed);
  g_adding.store(false, std::memory_order_relaxed);
}

}  // namespace cushare::shim
