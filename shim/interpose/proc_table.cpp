#include "shim/interpose/proc_table.hpp"

#include <cuda.h>

#include <algorithm>

namespace cushare::shim {
namespace {

constexpr ProcEntry kEntries[] = {
#include "proc_table.inc"
};

}  // namespace

std::span<const ProcEntry> proc_table() noexcept {
  return kEntries;
}

const char* resolve_proc_symbol(std::string_view base, int cuda_version,
                                std::uint64_t flags) noexcept {
  const auto* first = std::lower_bound(
      std::begin(kEntries), std::end(kEntries), base,
      [](const ProcEntry& e, std::string_view b) { return std::string_view(e.base) < b; });
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const ProcEntry* best_default = nullptr;
  const ProcEntry* best_per_thread = nullptr;
  for (const auto* e = first; e != std::end(kEntries) && base == e->base; ++e) {
    if (e->version > cuda_version) continue;
    if (e->variant == ProcVariant::kDefault) {
      if (!best_default || e->version > best_default->version) best_default = e;
    } else if (!best_per_thread || e->version > best_per_thread->version) {
      best_per_thread = e;
    }
  }
  if (per_thread && best_per_thread) return best_per_thread->symbol;
  return best_default ? best_default->symbol : nullptr;
}

}  // namespace cushare::shim
