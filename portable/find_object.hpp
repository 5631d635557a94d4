#pragma once
// Which loaded object holds an address, and where its unwind table is: what
// glibc 2.35's _dl_find_object answers, built on dl_iterate_phdr (glibc 2.2.4)
// so that a library linked for an older glibc can answer it too.
#include <dlfcn.h>

namespace cushare::portable {

// Fills `out` for the object whose loaded segments contain `pc` and returns 0,
// or returns -1 when no loaded object contains it. Takes the loader's lock, like
// the real function; async-signal-unsafe.
int find_object(void* pc, dl_find_object* out) noexcept;

}  // namespace cushare::portable
