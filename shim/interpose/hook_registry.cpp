#include "shim/interpose/hook_registry.hpp"

#include <algorithm>
#include <array>

#include "shim/hooks/decls.hpp"

namespace cushare::shim {
namespace {

constexpr std::size_t kCount = 0
#define CUSHARE_COUNT(sym, type, need) +1  // NOLINT(bugprone-macro-parentheses): a term of the sum
    CUSHARE_HOOKED_DRIVER_FUNCTIONS(CUSHARE_COUNT) CUSHARE_HOOKED_NVML_FUNCTIONS(CUSHARE_COUNT)
#undef CUSHARE_COUNT
    ;

// Built on first use (a function-local static), sorted by name.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cuLaunchCooperativeKernelMultiDevice
const std::array<HookEntry, kCount>& table() noexcept {
  static const std::array<HookEntry, kCount> sorted = [] {
    std::array<HookEntry, kCount> t{{
#define CUSHARE_ENTRY(sym, type, need) \
  {#sym, reinterpret_cast<void*>(&::sym), reinterpret_cast<void**>(&detail::g_real_driver.sym)},
        CUSHARE_HOOKED_DRIVER_FUNCTIONS(CUSHARE_ENTRY)
#undef CUSHARE_ENTRY
#define CUSHARE_ENTRY(sym, type, need) \
  {#sym, reinterpret_cast<void*>(&::sym), reinterpret_cast<void**>(&detail::g_real_nvml.sym)},
            CUSHARE_HOOKED_NVML_FUNCTIONS(CUSHARE_ENTRY)
#undef CUSHARE_ENTRY
    }};
    std::sort(t.begin(), t.end(), [](const HookEntry& a, const HookEntry& b) {
      return std::string_view(a.symbol) < std::string_view(b.symbol);
    });
    return t;
  }();
  return sorted;
}
#pragma GCC diagnostic pop

}  // namespace

const HookEntry* find_hook(std::string_view symbol) noexcept {
  if (symbol.size() < 3 || symbol[0] != 'c' || symbol[1] != 'u') {
    if (symbol.substr(0, 4) != "nvml") return nullptr;
  }
  const auto& t = table();
  auto it = std::lower_bound(
      t.begin(), t.end(), symbol,
      [](const HookEntry& e, std::string_view s) { return std::string_view(e.symbol) < s; });
  return it != t.end() && symbol == it->symbol ? &*it : nullptr;
}

std::span<const HookEntry> hook_entries() noexcept {
  return table();
}

}  // namespace cushare::shim
