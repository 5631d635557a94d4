#include "tests/fakegpu/cuda/handle_registry.hpp"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace fakegpu {

namespace {

struct Registry {
  std::shared_mutex mu;  // lookups share it; creations and destructions take it alone
  struct Entry {
    HandleKind kind;
    const void* owner;
  };
  std::unordered_map<const void*, Entry> kinds;
};

Registry& registry() {
  static auto* instance = new Registry();  // never destroyed: other threads may call in at exit
  return *instance;
}

}  // namespace

void register_handle(const void* object, HandleKind kind, const void* owner) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  r.kinds[object] = {kind, owner};
}

bool unregister_handle(const void* object, HandleKind kind) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  auto it = r.kinds.find(object);
  if (it == r.kinds.end() || it->second.kind != kind) return false;
  r.kinds.erase(it);
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

}  // namespace fakegpu
