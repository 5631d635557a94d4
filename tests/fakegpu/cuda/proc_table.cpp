// Kept free of cuda.h: it names every export by symbol only, whatever its signature.
#include "tests/fakegpu/cuda/proc_table.hpp"

#define FAKEGPU_PROC(base, version, pt, symbol) extern "C" void symbol(void);
#include "tests/fakegpu/cuda/proc_table.inc"
#undef FAKEGPU_PROC

namespace fakegpu {

const ProcEntry* proc_table(size_t* count) {
  static const ProcEntry table[] = {
#define FAKEGPU_PROC(base, version, pt, symbol) \
  {base, version, (pt) != 0, #symbol, reinterpret_cast<void*>(&(symbol))},
#include "tests/fakegpu/cuda/proc_table.inc"
#undef FAKEGPU_PROC
  };
  *count = sizeof table / sizeof table[0];
  return table;
}

}  // namespace fakegpu
