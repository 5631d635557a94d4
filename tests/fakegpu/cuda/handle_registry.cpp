#include "tests/fakegpu/cuda/handle_registry.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

namespace fakegpu {

namespace {

struct Registry {
  std::shared_mutex mu;  // lookups share it; creations and destructions take it alone
  struct Entry {
    HandleKind kind;
    const void* owner;
  };
  std::unordered_map<const void*, Entry> kinds;
  std::atomic<bool> remember_freed{false};
  std::unordered_map<const void*, HandleKind>
      freed;  // streams and events, only while remember_freed
};

// The kinds FAKEGPU_FREED_HANDLES=abort watches: those a caller keeps across
// calls and may name after their context ended.
bool remembered(HandleKind kind) {
  return kind == HandleKind::stream || kind == HandleKind::event;
}

Registry& registry() {
  static auto* instance = new Registry();  // never destroyed: other threads may call in at exit
  return *instance;
}

}  // namespace

void register_handle(const void* object, HandleKind kind, const void* owner) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  r.kinds[object] = {kind, owner};
  r.freed.erase(object);
}

bool unregister_handle(const void* object, HandleKind kind) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  auto it = r.kinds.find(object);
  if (it == r.kinds.end() || it->second.kind != kind) return false;
  r.kinds.erase(it);
  if (remembered(kind) && r.remember_freed.load(std::memory_order_relaxed)) r.freed[object] = kind;
  return true;
}

std::vector<std::pair<void*, HandleKind>> take_owned_handles(const void* owner) {
  std::vector<std::pair<void*, HandleKind>> taken;
  if (owner == nullptr) return taken;
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  for (auto it = r.kinds.begin(); it != r.kinds.end();) {
    if (it->second.owner == owner) {
      taken.emplace_back(const_cast<void*>(it->first), it->second.kind);
      if (remembered(it->second.kind) && r.remember_freed.load(std::memory_order_relaxed))
        r.freed[it->first] = it->second.kind;
      it = r.kinds.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

bool is_handle(const void* object, HandleKind kind) {
  if (object == nullptr) return false;
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  auto it = r.kinds.find(object);
  return it != r.kinds.end() && it->second.kind == kind;
}

void set_freed_handle_policy(bool abort) {
  registry().remember_freed.store(abort, std::memory_order_relaxed);
}

void abort_if_freed(const void* object, const char* call) {
  Registry& r = registry();
  if (!r.remember_freed.load(std::memory_order_relaxed)) return;
  HandleKind kind;
  {
    std::shared_lock lock(r.mu);
    auto it = r.freed.find(object);
    if (it == r.freed.end()) return;
    kind = it->second;
  }
  std::fprintf(stderr, "fakegpu: %s was given %p, a destroyed %s (FAKEGPU_FREED_HANDLES=abort)\n",
               call, object, kind == HandleKind::stream ? "stream" : "event");
  std::abort();
}

}  // namespace fakegpu
