// Definitions of the glibc symbols newer than cushare's floor (glibc 2.28)
// that GCC 12's static C++ runtime refers to. Linked only into the libraries
// that are loaded into foreign processes (libcushare.so, fakegpu's libcuda and
// libnvidia-ml): they link against bullseye's glibc (cmake/Portable.cmake) and
// bind these references to the local definitions below, never to the process's
// glibc, so the library loads wherever glibc 2.28 or later runs. Each is kept
// to what the runtime needs of it.
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "portable/find_object.hpp"

#define CUSHARE_LOCAL __attribute__((visibility("hidden")))

extern "C" {

// glibc 2.32. libstdc++ skips atomic reference counting when it reads 1; 0
// ("threads may exist") is always correct, and only costs the atomics.
CUSHARE_LOCAL char __libc_single_threaded = 0;

// glibc 2.35. libgcc's unwinder asks it for the unwind table of each frame.
// (glibc's declaration names the parameters with reserved identifiers.)
// NOLINTNEXTLINE(readability-inconsistent-declaration-parameter-name)
CUSHARE_LOCAL int _dl_find_object(void* pc, dl_find_object* result) noexcept {
  return cushare::portable::find_object(pc, result);
}

// glibc 2.36, reached only through std::random_device("arc4random"). Like
// glibc's, it cannot fail: without entropy the process aborts.
CUSHARE_LOCAL std::uint32_t arc4random() noexcept {
  std::uint32_t value = 0;
  for (;;) {
    const long got = syscall(SYS_getrandom, &value, sizeof value, 0);
    if (got == static_cast<long>(sizeof value)) return value;
    if (got < 0 && errno != EINTR) std::abort();
  }
}

}  // extern "C"
