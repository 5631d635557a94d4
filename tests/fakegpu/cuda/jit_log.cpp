#include "tests/fakegpu/cuda/jit_log.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace fakegpu {

int find_option(unsigned count, const CUjit_option* options, CUjit_option which) {
  for (unsigned i = 0; i < count; ++i) {
    if (options[i] == which) return static_cast<int>(i);
  }
  return -1;
}

namespace {

void fill_one(unsigned count, const CUjit_option* options, void** values, CUjit_option buffer,
              CUjit_option size_option, const char* text) {
  const int b = find_option(count, options, buffer);
  const int n = find_option(count, options, size_option);
  if (b < 0 || n < 0 || values[b] == nullptr) return;
  // The size travels in the pointer-sized slot itself (an unsigned int).
  const auto size = static_cast<unsigned>(reinterpret_cast<uintptr_t>(values[n]));
  if (size == 0) return;
  const size_t length = std::min<size_t>(std::strlen(text), size - 1);
  auto* out = static_cast<char*>(values[b]);
  std::memcpy(out, text, length);
  out[length] = '\0';
  values[n] = reinterpret_cast<void*>(static_cast<uintptr_t>(length + 1));
}

}  // namespace

void fill_jit_logs(unsigned count, const CUjit_option* options, void** values, const char* info,
                   const char* error) {
  if (count == 0 || options == nullptr || values == nullptr) return;
  fill_one(count, options, values, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, info);
  fill_one(count, options, values, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
           error);
}

}  // namespace fakegpu
