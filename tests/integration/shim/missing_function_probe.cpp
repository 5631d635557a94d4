// missing_function_probe: a program built for a newer driver than the one
// installed, run with the shim preloaded. Every function the shim hooks is
// looked up in the installed libraries (through the shim's dlsym hook);
// each one they lack is then called through the shim's export, which the
// program's references bind to when the driver has no such function, with
// zeroed arguments: it must answer CUDA_ERROR_NOT_FOUND /
// NVML_ERROR_FUNCTION_NOT_FOUND, not crash. Modes:
//   --driver older  fakegpu as a CUDA 11.4 driver (FAKEGPU_DRIVER_VERSION=11040):
//                   the shim initialises and enforces the quota; the functions
//                   newer than 11.4 are missing, and cuGetProcAddress and a
//                   handle-scoped dlsym say so rather than hand out a wrapper
//   --driver none   libraries that export nothing: every hook is missing
// Prints one line per missing function and exits non-zero on the first
// wrong answer.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "shim/hooks/decls.hpp"  // every hooked function with its exact ABI

using cushare::shim::Need;
namespace nvml = cushare::shim::nvml;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "missing_function_probe: FAILED: %s\n", what.c_str());
  std::exit(3);
}

void expect(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

// Calls `fn` with every argument zero (null pointers, 0, the first enum
// value): a guarded hook answers before it reads any of them.
template <class R, class... Args>
R call_zeroed(R (*fn)(Args...)) {
  return fn(Args{}...);
}

struct Counts {
  int missing = 0;
  int present = 0;
};

// One hooked function: present in the installed library, or missing and
// answered by the shim's export with `not_found`.
template <class Fn, class R>
void check_hook(void* library, const char* name, Need need, R not_found, bool driver_initialised,
                Counts& counts) {
  // The shim's dlsym hook: the wrapper when the library has the function,
  // else what glibc found there (nothing).
  if (dlsym(library, name)) {
    ++counts.present;
    return;
  }
  ++counts.missing;
  // Where a program's reference binds when the driver lacks the symbol.
  auto exported = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
  expect(exported != nullptr, std::string(name) + ": the shim does not export it");
  // A required function missing means the shim cannot initialise on this
  // library at all; the older-driver mode must lack optional ones only.
  expect(need == Need::kOptional || !driver_initialised,
         std::string(name) + " is required, yet missing from a driver the shim initialised on");
  if (std::string_view(name) == "cuGetProcAddress_v2" && driver_initialised) {
    return;  // answered through cuGetProcAddress; checked in check_resolvers
  }
  const R rc = call_zeroed(exported);
  expect(rc == not_found, std::string(name) + " returned " + std::to_string(rc) + ", not " +
                              std::to_string(not_found));
  std::printf("missing %-40s -> %d\n", name, static_cast<int>(rc));
}

// The resolvers of an 11.4 driver: no pointer for a newer function, and
// cuGetProcAddress_v2 (new in 12.0) still answers, through cuGetProcAddress.
void check_resolvers() {
  void* pfn = &pfn;
  CUresult rc = cuGetProcAddress("cuGraphInstantiateWithParams", &pfn, 11040, 0);
  expect(rc == CUDA_SUCCESS && pfn == nullptr,
         "cuGetProcAddress(cuGraphInstantiateWithParams, 11040) handed out a function");
  rc = cuGetProcAddress("cuGraphInstantiateWithParams", &pfn, 12000, 0);
  expect(rc == CUDA_ERROR_INVALID_VALUE,
         "cuGetProcAddress at 12000 on an 11.4 driver: " + std::to_string(rc));
  CUdriverProcAddressQueryResult status{};
  pfn = nullptr;
  rc = cuGetProcAddress_v2("cuMemAlloc", &pfn, 11040, 0, &status);
  expect(rc == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS &&
             pfn == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"),
         "cuGetProcAddress_v2 on an 11.4 driver did not hand out the shim's cuMemAlloc_v2");
}

// The shim still does its job on the older driver: a 1Gi quota is the view,
// and an allocation beyond it is refused.
void check_enforced() {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  expect(cuDeviceGet(&dev, 0) == CUDA_SUCCESS, "cuDeviceGet");
  expect(cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS, "cuDevicePrimaryCtxRetain");
  expect(cuCtxSetCurrent(ctx) == CUDA_SUCCESS, "cuCtxSetCurrent");
  size_t free = 0, total = 0;
  expect(cuMemGetInfo_v2(&free, &total) == CUDA_SUCCESS && total == (1ull << 30),
         "cuMemGetInfo_v2 total " + std::to_string(total) + " is not the 1Gi quota");
  CUdeviceptr p = 0;
  expect(cuMemAlloc_v2(&p, 2ull << 30) == CUDA_ERROR_OUT_OF_MEMORY, "2Gi allocated on 1Gi");
  expect(cuMemAlloc_v2(&p, 64ull << 20) == CUDA_SUCCESS && cuMemFree_v2(p) == CUDA_SUCCESS,
         "64Mi allocation");
  // The example: a direct reference, bound to the shim's export.
  CUgraphExec exec = nullptr;
  expect(cuGraphInstantiateWithParams(&exec, nullptr, nullptr) == CUDA_ERROR_NOT_FOUND,
         "direct cuGraphInstantiateWithParams");
}

}  // namespace

int main(int argc, char** argv) {
  const bool older =
      argc == 3 && std::strcmp(argv[1], "--driver") == 0 && std::strcmp(argv[2], "older") == 0;
  const bool none =
      argc == 3 && std::strcmp(argv[1], "--driver") == 0 && std::strcmp(argv[2], "none") == 0;
  if (!older && !none) fail("usage: missing_function_probe --driver older|none");

  const CUresult init = cuInit(0);
  expect(init == (older ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND),
         "cuInit returned " + std::to_string(init));
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  void* nvml_lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  expect(cuda && nvml_lib, "cannot load the installed libraries");

  Counts driver, nvml_counts;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cuLaunchCooperativeKernelMultiDevice
#define CHECK_DRIVER(sym, type, need) \
  check_hook<type>(cuda, #sym, Need::need, CUDA_ERROR_NOT_FOUND, older, driver);
  CUSHARE_HOOKED_DRIVER_FUNCTIONS(CHECK_DRIVER)
#undef CHECK_DRIVER
#pragma GCC diagnostic pop
#define CHECK_NVML(sym, type, need) \
  check_hook<type>(nvml_lib, #sym, Need::need, nvml::kErrorFunctionNotFound, older, nvml_counts);
  CUSHARE_HOOKED_NVML_FUNCTIONS(CHECK_NVML)
#undef CHECK_NVML

  if (older) {
    // What an 11.4 / R470 driver lacks of what the shim hooks; fewer means
    // the variant is not the driver this test means.
    expect(driver.missing >= 9, std::to_string(driver.missing) + " driver functions missing");
    expect(nvml_counts.missing == 2,
           std::to_string(nvml_counts.missing) + " NVML functions missing");
    check_resolvers();
    check_enforced();
  } else {
    expect(driver.present == 0 && nvml_counts.present == 0, "an empty library has functions");
  }
  std::printf("{\"driver_missing\": %d, \"driver_present\": %d, \"nvml_missing\": %d}\n",
              driver.missing, driver.present, nvml_counts.missing);
  return 0;
}
