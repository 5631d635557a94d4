// What the Driver API probes linked with -lcuda share: failing with a
// message, naming a result, starting on the primary context of device 0,
// and the virtual free memory the shim reports.
#pragma once

#include <cuda.h>
#include <errno.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace probe {

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "%s: FAILED: %s\n", program_invocation_short_name, what.c_str());
  std::exit(3);
}

inline std::string name_of(CUresult r) {
  const char* n = nullptr;
  return cuGetErrorName(r, &n) == CUDA_SUCCESS && n ? n : "CUresult(" + std::to_string(r) + ")";
}

inline void expect(CUresult r, const std::string& what) {
  if (r != CUDA_SUCCESS) fail(what + ": " + name_of(r));
}

// cuInit, then the primary context of device 0 retained and made current.
inline CUdevice start(CUcontext* primary = nullptr) {
  expect(cuInit(0), "cuInit");
  CUdevice dev = 0;
  expect(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx = nullptr;
  expect(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  expect(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  if (primary) *primary = ctx;
  return dev;
}

inline std::uint64_t free_view() {
  size_t free = 0, total = 0;
  expect(cuMemGetInfo(&free, &total), "cuMemGetInfo_v2");
  return free;
}

}  // namespace probe
