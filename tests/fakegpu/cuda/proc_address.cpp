// cuGetProcAddress / cuGetProcAddress_v2: resolve (base name, cudaVersion,
// flags) to the versioned export exactly as the driver documents it.
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "tests/fakegpu/cuda/driver.hpp"
#include "tests/fakegpu/cuda/proc_table.hpp"

using namespace fakegpu;

namespace {

int installed_driver_version() {
  Driver& d = driver();
  if (d.initialized) return d.config.driver_version;
  ConfigResult loaded = load_config();
  return loaded.config ? loaded.config->driver_version : 13000;
}

CUresult resolve(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<cuuint64_t>(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                                       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int installed = installed_driver_version();
  if (cudaVersion > installed) return CUDA_ERROR_INVALID_VALUE;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  size_t n = 0;
  const ProcEntry* table = proc_table(&n);
  const ProcEntry *legacy = nullptr, *threaded = nullptr;
  bool exists = false;
  for (size_t i = 0; i < n; ++i) {
    const ProcEntry& e = table[i];
    // Entry points newer than the simulated driver do not exist in it.
    if (e.version > installed || std::strcmp(e.base, symbol) != 0) continue;
    exists = true;
    if (e.version > cudaVersion) continue;
    const ProcEntry*& best = e.per_thread ? threaded : legacy;
    if (best == nullptr || e.version > best->version) best = &e;
  }
  const ProcEntry* chosen = per_thread && threaded ? threaded : legacy;
  *pfn = chosen ? chosen->function : nullptr;
  if (status) {
    *status = chosen   ? CU_GET_PROC_ADDRESS_SUCCESS
              : exists ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                       : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return CUDA_SUCCESS;
}

}  // namespace

FAKEGPU_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                         cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* symbolStatus) {
  return resolve(symbol, pfn, cudaVersion, flags, symbolStatus);
}

FAKEGPU_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                      cuuint64_t flags) {
  return resolve(symbol, pfn, cudaVersion, flags, nullptr);
}

// Called by every generated NOT_SUPPORTED fallback: says so once per name.
extern "C" int fakegpu_unsupported(const char* name) {
  static std::mutex mu;
  static auto* seen = new std::set<std::string>();
  std::lock_guard<std::mutex> guard(mu);
  if (seen->insert(name).second)
    std::fprintf(stderr, "fakegpu: %s is not supported (CUDA_ERROR_NOT_SUPPORTED)\n", name);
  return CUDA_ERROR_NOT_SUPPORTED;
}
