#pragma once
// Every handle fakegpu hands out (contexts, streams, events, modules, ...) is
// registered here with its kind when it is made and forgotten when it is
// destroyed. API entry points look a handle argument up before touching the
// object behind it, so a garbage value, a freed handle or a handle of another
// kind gets the driver's error instead of a dereference of a wild pointer.
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace fakegpu {

enum class HandleKind : uint8_t {
  context,
  stream,
  event,
  module,
  library,
  function,  // also what cuLibraryGetKernel returns: a CUkernel is usable as a CUfunction
  array,
  mipmapped_array,
  graph,
  graph_exec,
  graph_node,
  memory_pool,
  vmm_allocation,  // CUmemGenericAllocationHandle
  link_state,      // a pending JIT link (CUlinkState)
};

// Records `object` as a live handle of `kind` (replacing whatever a freed
// object at the same address was). `owner` is the context whose destruction
// destroys the object too (its modules, streams, events, arrays), or nullptr.
void register_handle(const void* object, HandleKind kind, const void* owner = nullptr);
// Forgets `object` if it is a live handle of `kind`. Returns false, changing
// nothing, if it is not: callers use it as the atomic "destroy once" step.
bool unregister_handle(const void* object, HandleKind kind);
// Forgets every handle `owner` owns and returns them, for the owner to destroy.
std::vector<std::pair<void*, HandleKind>> take_owned_handles(const void* owner);
// Whether `object` is a live handle of `kind`. Never dereferences it.
bool is_handle(const void* object, HandleKind kind);
// With `abort` (FAKEGPU_FREED_HANDLES=abort), destroyed stream and event
// handles (by their destroy call or with their context) are remembered until
// their address is handed out again, and abort_if_freed() ends the process
// on one.
void set_freed_handle_policy(bool abort);
// Called where a lookup of `object` as a stream or an event failed: aborts,
// naming the call, if the policy asks for it and `object` is a destroyed one.
void abort_if_freed(const void* object, const char* call);

// The object behind a handle value, or nullptr when the value is not a live
// handle of `kind`. Works for pointer handles and for integer handles
// (CUmemGenericAllocationHandle) alike.
template <typename T, typename Handle>
T* handle_object(Handle handle, HandleKind kind) {
  const void* p;
  if constexpr (std::is_pointer_v<Handle>) {
    p = handle;
  } else {
    p = reinterpret_cast<const void*>(static_cast<uintptr_t>(handle));
  }
  return is_handle(p, kind) ? static_cast<T*>(const_cast<void*>(p)) : nullptr;
}

}  // namespace fakegpu
