#include "shim/process/call_site.hpp"

#include <dlfcn.h>
#include <unwind.h>

#include <cstdint>
#include <cstdio>
#include <string_view>

namespace cushare::shim {
namespace {

constexpr int kMaxFrames = 16;

struct Walk {
  std::uintptr_t frames[kMaxFrames + 8];
  int count = 0;
};

_Unwind_Reason_Code collect(_Unwind_Context* ctx, void* data) {
  auto& w = *static_cast<Walk*>(data);
  if (w.count >= static_cast<int>(std::size(w.frames))) return _URC_END_OF_STACK;
  const std::uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  w.frames[w.count++] = ip;
  return _URC_NO_REASON;
}

std::string_view base_name(const char* path) {
  std::string_view p = path ? path : "";
  const auto slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

// The module this very function lives in: its frames are the shim's own.
const void* own_module() {
  Dl_info self{};
  return dladdr(reinterpret_cast<void*>(&collect), &self) ? self.dli_fbase : nullptr;
}

}  // namespace

std::string call_site() {
  Walk w;
  _Unwind_Backtrace(collect, &w);
  const void* own = own_module();
  std::string out;
  int shown = 0;
  for (int i = 0; i < w.count && shown < kMaxFrames; ++i) {
    // A return address points after the call: look up the call itself.
    const std::uintptr_t pc = w.frames[i] - 1;
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(pc), &info)) continue;
    if (own && info.dli_fbase == own) continue;
    char frame[320];
    const auto base = reinterpret_cast<std::uintptr_t>(info.dli_fbase);
    const std::string_view module = base_name(info.dli_fname);
    if (info.dli_sname) {
      std::snprintf(
          frame, sizeof frame, "%s+0x%lx (%.*s)", info.dli_sname,
          static_cast<unsigned long>(pc - reinterpret_cast<std::uintptr_t>(info.dli_saddr)),
          static_cast<int>(module.size()), module.data());
    } else {
      std::snprintf(frame, sizeof frame, "%.*s+0x%lx", static_cast<int>(module.size()),
                    module.data(), static_cast<unsigned long>(pc - base));
    }
    if (!out.empty()) out += " <- ";
    out += frame;
    ++shown;
  }
  return out.empty() ? "(no frames)" : out;
}

}  // namespace cushare::shim
