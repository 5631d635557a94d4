#include "shim/accounting/pointer_table.hpp"

#include <cstdlib>
#include <cstring>

namespace cushare::shim {

void PointerTable::Shard::lock() noexcept {
  for (;;) {
    if (!locked.exchange(true, std::memory_order_acquire)) return;
    while (locked.load(std::memory_order_relaxed)) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield" ::: "memory");
#endif
    }
  }
}

bool PointerTable::grow(Shard& s) noexcept {
  const std::uint32_t new_cap = s.slots ? (s.mask + 1) * 2 : 64;
  auto* fresh = static_cast<Slot*>(std::calloc(new_cap, sizeof(Slot)));
  if (!fresh) return false;
  const std::uint32_t new_mask = new_cap - 1;
  if (s.slots) {
    for (std::uint32_t i = 0; i <= s.mask; ++i) {
      const Slot& old = s.slots[i];
      if (!old.key) continue;
      std::uint32_t j = static_cast<std::uint32_t>(hash(old.key)) & new_mask;
      while (fresh[j].key) j = (j + 1) & new_mask;
      fresh[j] = old;
    }
    std::free(s.slots);
  }
  s.slots = fresh;
  s.mask = new_mask;
  return true;
}

bool PointerTable::insert(std::uint64_t key, const Charge& charge) noexcept {
  const std::uint64_t h = hash(key);
  Shard& s = shard_of(h);
  s.lock();
  // Keep the load factor at or below 1/2: probes stay short.
  if (!s.slots || (s.count + 1) * 2 > s.mask + 1) {
    if (!grow(s)) {
      s.unlock();
      return false;
    }
  }
  std::uint32_t i = static_cast<std::uint32_t>(h) & s.mask;
  while (s.slots[i].key && s.slots[i].key != key) i = (i + 1) & s.mask;
  if (!s.slots[i].key) ++s.count;
  s.slots[i].key = key;
  s.slots[i].charge = charge;
  s.unlock();
  return true;
}

std::optional<Charge> PointerTable::erase_locked(Shard& s, std::uint64_t key,
                                                 std::uint64_t h) noexcept {
  if (!s.slots) return std::nullopt;
  std::uint32_t i = static_cast<std::uint32_t>(h) & s.mask;
  while (s.slots[i].key != key) {
    if (!s.slots[i].key) return std::nullopt;
    i = (i + 1) & s.mask;
  }
  const Charge found = s.slots[i].charge;
  // Backward-shift deletion: move later members of the probe run into the
  // hole when their home slot allows it, so lookups never need tombstones.
  std::uint32_t hole = i;
  for (std::uint32_t j = (i + 1) & s.mask; s.slots[j].key; j = (j + 1) & s.mask) {
    const std::uint32_t home = static_cast<std::uint32_t>(hash(s.slots[j].key)) & s.mask;
    // Move j into hole if home is not cyclically in (hole, j].
    const bool home_in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!home_in_range) {
      s.slots[hole] = s.slots[j];
      hole = j;
    }
  }
  s.slots[hole].key = 0;
  --s.count;
  return found;
}

std::optional<Charge> PointerTable::take(std::uint64_t key) noexcept {
  const std::uint64_t h = hash(key);
  Shard& s = shard_of(h);
  s.lock();
  auto found = erase_locked(s, key, h);
  s.unlock();
  return found;
}

std::optional<Charge> PointerTable::find(std::uint64_t key) noexcept {
  const std::uint64_t h = hash(key);
  Shard& s = shard_of(h);
  s.lock();
  std::optional<Charge> found;
  if (s.slots) {
    for (std::uint32_t i = static_cast<std::uint32_t>(h) & s.mask; s.slots[i].key;
         i = (i + 1) & s.mask) {
      if (s.slots[i].key == key) {
        found = s.slots[i].charge;
        break;
      }
    }
  }
  s.unlock();
  return found;
}

std::uint64_t PointerTable::size() noexcept {
  std::uint64_t n = 0;
  for (auto& s : shards_) {
    s.lock();
    n += s.count;
    s.unlock();
  }
  return n;
}

void PointerTable::reset_after_fork() noexcept {
  for (auto& s : shards_) {
    if (s.slots) std::memset(static_cast<void*>(s.slots), 0, (s.mask + 1) * sizeof(Slot));
    s.count = 0;
    s.locked.store(false, std::memory_order_relaxed);
  }
}

}  // namespace cushare::shim
