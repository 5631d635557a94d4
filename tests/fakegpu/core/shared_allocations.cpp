#include "tests/fakegpu/core/shared_allocations.hpp"

#include <algorithm>

#include "tests/fakegpu/core/engine.hpp"

namespace fakegpu {

int32_t publish_shared(SharedState& s, int32_t proc, uint32_t device, uint64_t bytes,
                       uint64_t handle_types, uint64_t file_dev, uint64_t file_ino) {
  for (int32_t i = 0; i < static_cast<int32_t>(kMaxSharedAllocations); ++i) {
    SharedAllocation& a = s.shared[i];
    if (a.state == SlotState::live) continue;
    a = SharedAllocation{};
    a.state = SlotState::live;
    a.device = device;
    a.bytes = bytes;
    a.handle_types = handle_types;
    a.file_dev = file_dev;
    a.file_ino = file_ino;
    a.charged_proc = proc;
    a.holder_count = 1;
    a.holders[0] = proc;
    return i;
  }
  return -1;
}

int32_t find_shared(const SharedState& s, uint64_t file_dev, uint64_t file_ino) {
  for (int32_t i = 0; i < static_cast<int32_t>(kMaxSharedAllocations); ++i) {
    const SharedAllocation& a = s.shared[i];
    if (a.state == SlotState::live && a.file_dev == file_dev && a.file_ino == file_ino) return i;
  }
  return -1;
}

bool hold_shared(SharedState& s, int32_t slot, int32_t proc) {
  SharedAllocation& a = s.shared[slot];
  if (a.state != SlotState::live) return false;
  int32_t* end = a.holders + a.holder_count;
  if (std::find(a.holders, end, proc) != end) return true;
  if (a.holder_count == kMaxSharedHolders) return false;
  a.holders[a.holder_count++] = proc;
  return true;
}

void drop_shared(SharedState& s, int32_t slot, int32_t proc) {
  SharedAllocation& a = s.shared[slot];
  if (a.state != SlotState::live) return;
  int32_t* end = a.holders + a.holder_count;
  int32_t* it = std::find(a.holders, end, proc);
  if (it == end) return;
  std::copy(it + 1, end, it);
  --a.holder_count;
  if (a.charged_proc != proc) return;
  if (a.holder_count == 0) {
    uncharge(s, proc, a.device, a.bytes);
    a.state = SlotState::free;
    return;
  }
  // Moved, not returned: the device's used memory does not change.
  const uint64_t moved = std::min(a.bytes, s.procs[proc].mem[a.device]);
  s.procs[proc].mem[a.device] -= moved;
  a.charged_proc = a.holders[0];
  s.procs[a.charged_proc].mem[a.device] += moved;
}

void drop_all_shared(SharedState& s, int32_t proc) {
  for (int32_t i = 0; i < static_cast<int32_t>(kMaxSharedAllocations); ++i) drop_shared(s, i, proc);
}

}  // namespace fakegpu
