// Tracks what the shim charged for each live allocation it made, keyed by
// device pointer (or by VMM / array handle in a separate table), so frees
// return exactly that. On the hot path of every alloc+free pair:
//  - sharded by a hash of the key (64 shards), each an open-addressing table
//    with linear probing and backward-shift deletion (no tombstones);
//  - each shard guarded by a one-byte spinlock held for a few loads and
//    stores; uncontended it is one atomic exchange and one store;
//  - no syscall; memory is allocated only when a shard grows (doubling), so
//    steady-state alloc/free allocates nothing.
// Unknown keys (imports, IPC, graph or external memory) are simply absent:
// take() returns nullopt and the hook passes the free through untouched.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

namespace cushare::shim {

enum class ChargeKind : std::uint8_t {
  kDevice,       // cuMemAlloc*, cuMemAllocPitch*: `bytes` charged
  kManaged,      // cuMemAllocManaged: `bytes` charged
  kAsyncPool,    // cuMemAlloc(FromPool)Async: charged through its pool's growth, not here
  kAsyncDirect,  // async allocation charged per pointer (pool attributes unavailable)
  kVmmHandle,    // cuMemCreate on a device location
  kArray,        // cuArray*Create*, cuMipmappedArrayCreate
};

struct Charge {
  std::uint64_t bytes = 0;
  std::uint8_t gpu = 0;  // index into limits.gpus[]
  ChargeKind kind = ChargeKind::kDevice;
  std::uint16_t aux = 0;  // kind-specific (kAsyncPool: pool record index)
};

class PointerTable {
 public:
  PointerTable() = default;  // constant-initialisable: no constructor code runs at load
  PointerTable(const PointerTable&) = delete;
  PointerTable& operator=(const PointerTable&) = delete;

  // Records `key` (non-zero). A key already present is overwritten (the driver
  // never hands out a live pointer twice; an overwrite means we missed a free).
  // Returns false only if memory for growing the shard could not be allocated.
  bool insert(std::uint64_t key, const Charge& charge) noexcept;

  // Removes `key` and returns its charge; nullopt if it was not recorded.
  std::optional<Charge> take(std::uint64_t key) noexcept;

  // Reads without removing.
  std::optional<Charge> find(std::uint64_t key) noexcept;

  // Removes every entry for which `gone(key, charge)` holds and hands its
  // charge to `removed`. Both run under the entry's shard lock, so a key the
  // driver hands out again meanwhile is never taken for the old one: its
  // insert waits for the lock. For rare events (a context destroyed): it
  // visits every slot.
  template <class Gone, class Removed>
  void sweep(Gone&& gone, Removed&& removed) noexcept {
    for (auto& s : shards_) {
      s.lock();
      for (std::uint32_t i = 0; s.slots && i <= s.mask;) {
        const Slot slot = s.slots[i];
        if (slot.key && gone(slot.key, slot.charge)) {
          erase_locked(s, slot.key, hash(slot.key));  // a later entry may shift into i
          removed(slot.charge);
        } else {
          ++i;
        }
      }
      s.unlock();
    }
  }

  // Number of live entries (sum over shards; racy snapshot, for tests/stats).
  std::uint64_t size() noexcept;

  // After fork(), in the child: the parent's allocations are not the child's.
  // Drops every entry and unlocks every shard without touching the locks'
  // previous holders (they do not exist in the child).
  void reset_after_fork() noexcept;

  static constexpr unsigned kShards = 64;

 private:
  struct Slot {
    std::uint64_t key;  // 0 = empty
    Charge charge;
  };
  struct alignas(64) Shard {
    std::atomic<bool> locked{false};
    std::uint32_t count = 0;
    std::uint32_t mask = 0;  // capacity - 1; capacity 0 until first insert
    Slot* slots = nullptr;
    void lock() noexcept;
    void unlock() noexcept { locked.store(false, std::memory_order_release); }
  };

  static std::uint64_t hash(std::uint64_t key) noexcept {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return key;
  }
  Shard& shard_of(std::uint64_t h) noexcept { return shards_[h >> 58]; }
  static bool grow(Shard& s) noexcept;
  static std::optional<Charge> erase_locked(Shard& s, std::uint64_t key, std::uint64_t h) noexcept;

  Shard shards_[kShards];
};

}  // namespace cushare::shim
