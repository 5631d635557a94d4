// The table of exported wrappers, by exact exported symbol name: what the
// dlsym hook and the cuGetProcAddress hooks hand out instead of the driver's
// functions, and where the real function is stored.
#pragma once

#include <span>
#include <string_view>

namespace cushare::shim {

struct HookEntry {
  const char* symbol;  // exported name, e.g. "cuMemAlloc_v2"
  void* wrapper;       // the shim's function of that name
  void** real_slot;    // the RealDriver / RealNvml member holding the real one
};

// nullptr when `symbol` is not hooked. Cheap rejection of names that do not
// start with "cu" or "nvml"; binary search otherwise.
const HookEntry* find_hook(std::string_view symbol) noexcept;

// Every hook, sorted by symbol.
std::span<const HookEntry> hook_entries() noexcept;

}  // namespace cushare::shim
