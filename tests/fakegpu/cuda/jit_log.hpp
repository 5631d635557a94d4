#pragma once
// The JIT log buffers a caller passes with CU_JIT_INFO_LOG_BUFFER and
// CU_JIT_ERROR_LOG_BUFFER: the driver always leaves a NUL-terminated string
// in them (within the given size), so a caller may print them after any load.
#include <cuda.h>

namespace fakegpu {

// Index of option `which` among `options`, or -1.
int find_option(unsigned count, const CUjit_option* options, CUjit_option which);

// Writes `info` and `error` (truncated to the buffers' sizes) into the buffers
// named by the options and reports the bytes written, NUL included, back
// through the *_LOG_BUFFER_SIZE_BYTES option values. Unknown options are ignored.
void fill_jit_logs(unsigned count, const CUjit_option* options, void** values, const char* info,
                   const char* error);

}  // namespace fakegpu
