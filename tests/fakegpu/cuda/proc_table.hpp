#pragma once
// The cuGetProcAddress table: every (base name, PFN version, per-thread?)
// triple of cudaTypedefs.h with the function fakegpu exports for it.
#include <cstddef>

namespace fakegpu {

struct ProcEntry {
  const char* base;
  int version;
  bool per_thread;
  const char* symbol;
  void* function;
};

const ProcEntry* proc_table(size_t* count);

}  // namespace fakegpu
