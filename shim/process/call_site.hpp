#pragma once
// The call site of a refused allocation, for the out-of-quota log line
// (CUSHARE_OOM_BACKTRACE=1).
#include <string>

namespace cushare::shim {

// The caller's stack, innermost first, up to 16 frames, skipping frames in
// this library: "symbol+0xoff (module)" where the dynamic symbol table names
// the function, else "module+0xoff" (an offset addr2line takes). Uses the
// unwinder linked into the library, so it needs nothing from the process.
std::string call_site();

}  // namespace cushare::shim
