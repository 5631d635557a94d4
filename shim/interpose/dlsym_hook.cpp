// The dlsym hook. cudart, TF/XLA, older PyTorch and NVML users resolve driver
// functions with a handle-scoped dlsym, which LD_PRELOAD alone does not
// intercept. The shim exports `dlsym` and:
//  - for names in the hook table (cu*/nvml* functions the shim wraps) asks
//    glibc's dlsym with the caller's handle; if the handle provides the
//    symbol, returns the shim's wrapper (binding the real pointer it found
//    if loading by soname found none); if not, returns what glibc returned;
//  - for every other name jumps straight into glibc's dlsym with the
//    caller's own return address (a tail jump, written in assembly on
//    x86-64), so RTLD_NEXT keeps meaning "after the caller", not "after the
//    shim", and nothing else changes.
// glibc's dlsym is found with dlvsym (see real_dlsym()); the hook never calls
// the public dlsym, so it cannot recurse.
#include <dlfcn.h>

#include <cstdlib>
#include <string_view>

#include "shim/driver/real_driver.hpp"
#include "shim/interpose/hook_registry.hpp"
#include "shim/process/allocation_state.hpp"
#include "shim/process/shim_env.hpp"

namespace cushare::shim {

extern "C" __attribute__((visibility("hidden"))) void* cushare_dlsym_hooked(void* handle,
                                                                            const char* name) {
  const HookEntry* hook = find_hook(name);
  void* found = real_dlsym()(handle, name);
  if (!hook || !found || found == hook->wrapper || disabled_by_env()) return found;
  bind_real_if_missing(hook->real_slot, found);
  return hook->wrapper;
}

// Where the exported dlsym continues: glibc's dlsym (most names) or the
// hooked path above.
extern "C" __attribute__((visibility("hidden"))) void* cushare_dlsym_route(void* /*handle*/,
                                                                           const char* name) {
  if (name && find_hook(name)) return reinterpret_cast<void*>(&cushare_dlsym_hooked);
  return reinterpret_cast<void*>(real_dlsym());
}

}  // namespace cushare::shim

#if defined(__x86_64__)
// dlsym(handle, name): save the arguments, ask the router where to go, then
// tail-jump there with the caller's return address still on the stack.
asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
    .p2align 4
dlsym:
    .cfi_startproc
    endbr64
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call cushare_dlsym_route
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    jmp *%rax
    .cfi_endproc
    .size dlsym, .-dlsym
)");
#else
// Other architectures: a plain call. RTLD_NEXT lookups then resolve relative
// to the shim (which is loaded first, so for preloaded use the result is the
// same unless the caller is itself an interposer loaded after the shim).
extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  using Fn = void* (*)(void*, const char*);
  auto target = reinterpret_cast<Fn>(cushare::shim::cushare_dlsym_route(handle, name));
  return target(handle, name);
}
#endif
