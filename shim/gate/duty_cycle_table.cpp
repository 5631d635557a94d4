#include "shim/gate/duty_cycle_table.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <vector>

#include "shim/gate/duty_cycle_plan.hpp"
#include "shm/run_dir_layout.hpp"

namespace cushare::shim {
namespace {

struct Slot {  // 128 bytes
  char alloc_id[64];
  char gpu_uuid[48];
  std::uint32_t limit_pct;
  std::uint32_t gpu_index;  // kGpuIndexTag | the GPU's entry in the claimer's regions
  std::uint64_t heartbeat_ns;
};
static_assert(sizeof(Slot) == 128);

// Shims that predate the index left this word as they found it (0, or a
// later shim's index from a claim they took over): only a tagged word names
// an entry, and an untagged one names none (the neighbour is never lent
// from, rather than read at the wrong entry).
constexpr std::uint32_t kGpuIndexTag = 0xC5A0'0000;
constexpr std::uint32_t kGpuIndexMask = 0x0000'FFFF;
constexpr std::uint32_t kNoGpuIndex = 0xFFFF'FFFF;

std::uint32_t tagged(std::uint32_t index) {
  return kGpuIndexTag | (index & kGpuIndexMask);
}
std::uint32_t untagged(std::uint32_t word) {
  return (word & ~kGpuIndexMask) == kGpuIndexTag ? word & kGpuIndexMask : kNoGpuIndex;
}

std::string_view field(const char* s, std::size_t n) {
  return {s, strnlen(s, n)};
}

void copy_field(char* dst, std::size_t n, std::string_view v) {
  std::memset(dst, 0, n);
  std::memcpy(dst, v.data(), std::min(v.size(), n - 1));
}

// Reads the table, refreshes this allocation's claim (taking a stale or free
// slot), writes it back, and returns the allocation's slot of the period.
DutySlot claim(int fd, const std::string& id, const std::string& uuid, std::uint32_t gpu_index,
               std::uint32_t pct, std::uint64_t now, std::vector<DutyNeighbour>* neighbours) {
  std::array<Slot, kDutyTableSlots> slots{};
  const ssize_t got = pread(fd, slots.data(), sizeof(slots), 0);
  const DutyClaim self{id, uuid, pct};
  if (got < 0) return duty_slot({}, self);
  if (static_cast<std::size_t>(got) < sizeof(slots))
    std::memset(reinterpret_cast<char*>(slots.data()) + got, 0, sizeof(slots) - got);
  auto live = [now](const Slot& s) {
    return s.heartbeat_ns <= now && now - s.heartbeat_ns < kDutyClaimTtlNs && s.alloc_id[0];
  };
  int mine = -1, free_slot = -1;
  for (unsigned i = 0; i < kDutyTableSlots; ++i) {
    const Slot& s = slots[i];
    if (field(s.alloc_id, sizeof(s.alloc_id)) == id &&
        field(s.gpu_uuid, sizeof(s.gpu_uuid)) == uuid)
      mine = static_cast<int>(i);
    else if (free_slot < 0 && !live(s))
      free_slot = static_cast<int>(i);
  }
  if (mine < 0) mine = free_slot;
  if (mine < 0) return duty_slot({}, self);  // full: overlap rather than fail
  Slot& s = slots[static_cast<unsigned>(mine)];
  copy_field(s.alloc_id, sizeof(s.alloc_id), id);
  copy_field(s.gpu_uuid, sizeof(s.gpu_uuid), uuid);
  s.limit_pct = pct;
  s.gpu_index = tagged(gpu_index);
  s.heartbeat_ns = now;
  if (pwrite(fd, &s, sizeof(s), static_cast<off_t>(mine) * sizeof(Slot)) != sizeof(s))
    return duty_slot({}, self);
  std::vector<DutyClaim> claims;
  for (const Slot& c : slots) {
    if (!live(c)) continue;
    const DutyClaim other{field(c.alloc_id, sizeof(c.alloc_id)),
                          field(c.gpu_uuid, sizeof(c.gpu_uuid)), c.limit_pct};
    claims.push_back(other);
    if (neighbours && other.gpu_uuid == uuid && other.alloc_id != id)
      neighbours->push_back({std::string(other.alloc_id), untagged(c.gpu_index)});
  }
  return duty_slot(claims, self);
}

}  // namespace

DutySlot duty_slot_for(const std::string& alloc_folder, const std::string& gpu_uuid,
                       std::uint32_t gpu_index, std::uint32_t limit_pct, std::uint64_t now,
                       std::vector<DutyNeighbour>* neighbours) noexcept {
  const DutySlot alone = duty_slot({}, {{}, {}, limit_pct});
  try {
    const std::filesystem::path folder(alloc_folder);
    if (folder.parent_path().filename() != shm::kAllocDirName) return alone;  // no node run dir
    const auto table = folder.parent_path().parent_path() / kDutyTableName;
    const int fd =
        ::open(table.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0) return alone;
    struct stat sb {};
    DutySlot slot = alone;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && flock(fd, LOCK_EX) == 0) {
      slot = claim(fd, folder.filename().string(), gpu_uuid, gpu_index, limit_pct, now, neighbours);
      flock(fd, LOCK_UN);
    }
    ::close(fd);
    return slot;
  } catch (...) {
    return alone;
  }
}

}  // namespace cushare::shim
