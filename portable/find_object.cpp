#include "portable/find_object.hpp"

#include <link.h>

#include <algorithm>
#include <cstdint>

namespace cushare::portable {
namespace {

struct Search {
  std::uintptr_t pc;
  dl_find_object* out;
  bool found;
};

int visit(dl_phdr_info* info, size_t, void* data) {
  auto& s = *static_cast<Search*>(data);
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;
  const ElfW(Phdr)* eh_frame = nullptr;
  bool inside = false;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
      const std::uintptr_t end = start + ph.p_memsz;
      lo = std::min(lo, start);
      hi = std::max(hi, end);
      inside = inside || (s.pc >= start && s.pc < end);
    } else if (ph.p_type == PT_GNU_EH_FRAME) {
      eh_frame = &ph;
    }
  }
  if (!inside) return 0;
  *s.out = dl_find_object{};
  s.out->dlfo_map_start = reinterpret_cast<void*>(lo);
  s.out->dlfo_map_end = reinterpret_cast<void*>(hi);
  s.out->dlfo_eh_frame =
      eh_frame ? reinterpret_cast<void*>(info->dlpi_addr + eh_frame->p_vaddr) : nullptr;
  s.found = true;
  return 1;
}

}  // namespace

int find_object(void* pc, dl_find_object* out) noexcept {
  Search s{reinterpret_cast<std::uintptr_t>(pc), out, false};
  dl_iterate_phdr(visit, &s);
  if (!s.found) return -1;
  // The link map, as the real function gives it (dladdr1: glibc 2.3.3).
  Dl_info info;
  link_map* map = nullptr;
  if (dladdr1(pc, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) != 0) {
    out->dlfo_link_map = map;
  }
  return 0;
}

}  // namespace cushare::portable
