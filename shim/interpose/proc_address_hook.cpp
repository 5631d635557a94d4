// cuGetProcAddress (4 arguments, PFN v11030) and cuGetProcAddress_v2 (5
// arguments, v12000). cudart, NCCL, PyTorch and TransformerEngine take all
// their driver pointers from here. The real resolver is asked first with the
// caller's exact arguments (so its result, error and symbolStatus are the
// driver's); when it found a function, the request (base name, cudaVersion,
// flags) is mapped through the table generated from cudaTypedefs.h to the
// exact exported symbol (ABI) the driver returned, and if the shim wraps that
// symbol the wrapper is returned instead. A request for "cuGetProcAddress"
// itself therefore returns the shim's resolver of the matching ABI.
// Unlike the other hooks, each answers through whichever of the two resolvers
// the driver has (both optional in real_driver.hpp); only a driver with
// neither gets CUDA_ERROR_NOT_FOUND.
#include <atomic>
#include <cstring>
#include <string_view>

#include "shim/driver/real_driver.hpp"
#include "shim/hooks/decls.hpp"
#include "shim/interpose/hook_registry.hpp"
#include "shim/interpose/proc_table.hpp"
#include "shim/process/allocation_state.hpp"
#include "shim/process/logging.hpp"
#include "shim/process/shim_env.hpp"

namespace cushare::shim {
namespace {

bool is_allocation_api(std::string_view name) {
  for (std::string_view p : {"cuMem", "cuArray", "cuMipmappedArray", "cuGraphAdd", "cuGraphExec"})
    if (name.substr(0, p.size()) == p) return true;
  return false;
}

void* substitute(const char* symbol, void* found, int cuda_version, cuuint64_t flags) {
  if (!symbol || !found || disabled_by_env()) return found;
  const char* exported = resolve_proc_symbol(symbol, cuda_version, flags);
  if (!exported) {
    // The driver knows an API this build's cudaTypedefs.h does not: if it
    // allocates memory it bypasses the quota. Say so once per name class.
    static std::atomic<bool> warned{false};
    if (is_allocation_api(symbol) && !warned.exchange(true)) {
      log().warn(
          "cuGetProcAddress('{}', {}): unknown to this build of the shim; allocations "
          "through it are not charged to the quota",
          symbol, cuda_version);
    }
    return found;
  }
  const HookEntry* hook = find_hook(exported);
  if (!hook || found == hook->wrapper) return found;
  bind_real_if_missing(hook->real_slot, found);
  return hook->wrapper;
}

// At trace level every request is logged as `<resolver> lookup<TAB>symbol<TAB>
// cudaVersion<TAB>flags`: the list a runtime's start-up makes is regenerated
// from these lines (docs/fakegpu.md, "The CUDA runtime's lookups").
void log_lookup(const char* resolver, const char* symbol, int cuda_version, cuuint64_t flags) {
  auto& l = log();
  if (!l.should_log(spdlog::level::trace)) return;
  const char* name = !symbol ? "(null)" : *symbol ? symbol : "(empty)";
  if (flags == 0) {
    l.trace("{} lookup\t{}\t{}\t0", resolver, name, cuda_version);
  } else {
    l.trace("{} lookup\t{}\t{}\t{:#x}", resolver, name, cuda_version, flags);
  }
}

}  // namespace
}  // namespace cushare::shim

using namespace cushare::shim;

extern "C" CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* symbolStatus) {
  log_lookup("cuGetProcAddress_v2", symbol, cudaVersion, flags);
  const RealDriver& r = real();
  CUresult rc;
  if (r.cuGetProcAddress_v2) {
    rc = r.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
  } else if (r.cuGetProcAddress) {
    rc = r.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (symbolStatus && rc == CUDA_SUCCESS) {
      *symbolStatus =
          pfn && *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
  } else {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (rc == CUDA_SUCCESS && pfn) *pfn = substitute(symbol, *pfn, cudaVersion, flags);
  return rc;
}

extern "C" CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags) {
  log_lookup("cuGetProcAddress", symbol, cudaVersion, flags);
  const RealDriver& r = real();
  CUresult rc;
  if (r.cuGetProcAddress) {
    rc = r.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
  } else if (r.cuGetProcAddress_v2) {
    rc = r.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
  } else {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (rc == CUDA_SUCCESS && pfn) *pfn = substitute(symbol, *pfn, cudaVersion, flags);
  return rc;
}
