#include "tests/fakegpu/cuda/handle_registry.hpp"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace fakegpu {

namespace {

struct Registry {
  std::shared_mutex mu;  // lookups share it; creations and destructions take it alone
  std::unordered_map<const void*, HandleKind> kinds;
};

Registry& registry() {
  static auto* instance = new Registry();  // never destroyed: other threads may call in at exit
  return *instance;
}

}  // namespace

void register_handle(const void* object, HandleKind kind) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  r.kinds[object] = kind;
}

bool unregister_handle(const void* object, HandleKind kind) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  auto it = r.kinds.find(object);
  if (it == r.kinds.end() || it->second != kind) return false;
  r.kinds.erase(it);
  return true;
}

bool is_handle(const void* object, HandleKind kind) {
  if (object == nullptr) return false;
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  auto it = r.kinds.find(object);
  return it != r.kinds.end() && it->second == kind;
}

}  // namespace fakegpu
