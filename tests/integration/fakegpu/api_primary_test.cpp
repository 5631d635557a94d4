// The primary context is one handle per device for the life of the process,
// as the CUDA runtime expects of the driver: it exists before the first
// retain, may be made current while inactive, every retain returns it, and
// after release-to-zero or reset it is inactive (its work refused, everything
// created in it gone, its overhead returned) until a retain activates it again.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tests/integration/fakegpu/cu_expect.hpp"
#include "tests/integration/fakegpu/noop_ptx.hpp"

namespace {

using fakegpu_test::error_name;

constexpr const char* kPtx = fakegpu_test::kNoopPtx;

// The primary context of device 1 (the T4): the other suites keep device 0's
// primary context retained, so device 1's is this suite's alone.
constexpr CUdevice kDevice = 1;

// The stand-in for the runtime's private way to the primary context's handle.
CUcontext primary_handle() {
  using Get = CUresult (*)(CUcontext*, CUdevice);
  auto get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "fakegpuPrivatePrimaryCtxGet"));
  CUcontext ctx = nullptr;
  EXPECT_NE(get, nullptr);
  if (get) {
    EXPECT_EQ(get(&ctx, kDevice), CUDA_SUCCESS);
  }
  return ctx;
}

int active_state() {
  unsigned flags = 0;
  int active = -1;
  EXPECT_EQ(cuDevicePrimaryCtxGetState(kDevice, &flags, &active), CUDA_SUCCESS);
  return active;
}

// Device memory in use, as every process sees it (the context overhead included).
uint64_t used_bytes() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  return total - free;
}

// Work in the current context: a module, a launch, an allocation, a stream, an event.
struct Work {
  CUmodule module = nullptr;
  CUfunction noop = nullptr;
  CUdeviceptr buffer = 0;
  CUstream stream = nullptr;
  CUevent event = nullptr;
};

void do_work(Work& w) {
  ASSERT_EQ(error_name(cuModuleLoadData(&w.module, kPtx)), "CUDA_SUCCESS");
  ASSERT_EQ(cuModuleGetFunction(&w.noop, w.module, "noop"), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&w.buffer, 4 << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&w.stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&w.event, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(w.noop, 1, 1, 1, 32, 1, 1, 0, w.stream, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(w.event, w.stream), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

// Everything `w` made died with the context's last activation.
void expect_gone(const Work& w) {
  CUfunction f = nullptr;
  EXPECT_EQ(error_name(cuModuleGetFunction(&f, w.module, "noop")), "CUDA_ERROR_INVALID_HANDLE");
  EXPECT_EQ(error_name(cuLaunchKernel(w.noop, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr)),
            "CUDA_ERROR_INVALID_HANDLE");
  EXPECT_EQ(error_name(cuStreamQuery(w.stream)), "CUDA_ERROR_INVALID_HANDLE");
  EXPECT_EQ(error_name(cuEventQuery(w.event)), "CUDA_ERROR_INVALID_HANDLE");
  EXPECT_EQ(error_name(cuMemFree(w.buffer)), "CUDA_ERROR_INVALID_VALUE");
}

TEST(PrimaryContext, FollowsTheRuntimesSequenceThroughResetAndRetain) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  const CUcontext primary = primary_handle();
  ASSERT_NE(primary, nullptr);
  EXPECT_EQ(primary_handle(), primary);  // one handle, not one per look-up

  // Current before it is retained: allowed, and work in it is refused.
  ASSERT_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS);
  CUcontext current = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  EXPECT_EQ(active_state(), 0);
  CUdeviceptr p = 0;
  EXPECT_EQ(error_name(cuMemAlloc(&p, 1 << 20)), "CUDA_ERROR_CONTEXT_IS_DESTROYED");
  CUmodule m = nullptr;
  EXPECT_EQ(error_name(cuModuleLoadData(&m, kPtx)), "CUDA_ERROR_CONTEXT_IS_DESTROYED");
  EXPECT_EQ(error_name(cuDevicePrimaryCtxRelease(kDevice)), "CUDA_ERROR_INVALID_CONTEXT");

  // An inactive primary context takes no device memory (measured from an
  // explicit context on the same device).
  CUcontext probe = nullptr;
  ASSERT_EQ(cuCtxCreate(&probe, nullptr, 0, kDevice), CUDA_SUCCESS);
  const uint64_t before = used_bytes();

  // Retain returns that same handle, and charges its overhead.
  CUcontext retained = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&retained, kDevice), CUDA_SUCCESS);
  EXPECT_EQ(retained, primary);
  EXPECT_EQ(active_state(), 1);
  EXPECT_EQ(used_bytes() - before, 300u << 20);

  ASSERT_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS);
  Work first;
  do_work(first);
  ASSERT_EQ(cuCtxSetCurrent(probe), CUDA_SUCCESS);
  EXPECT_EQ(used_bytes() - before, (300u << 20) + (4u << 20) + (2u << 20));  // + the module

  // Reset: inactive, its state and memory gone, the handle the same.
  ASSERT_EQ(cuDevicePrimaryCtxReset(kDevice), CUDA_SUCCESS);
  EXPECT_EQ(active_state(), 0);
  EXPECT_EQ(used_bytes(), before);
  expect_gone(first);
  ASSERT_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS);
  EXPECT_EQ(error_name(cuMemAlloc(&p, 1 << 20)), "CUDA_ERROR_CONTEXT_IS_DESTROYED");
  // The reset kept the reference ("resetting the primary context does not
  // release it"): its release succeeds, leaves the context inactive, and
  // there is none left after it.
  EXPECT_EQ(error_name(cuDevicePrimaryCtxRelease(kDevice)), "CUDA_SUCCESS");
  EXPECT_EQ(active_state(), 0);
  EXPECT_EQ(error_name(cuDevicePrimaryCtxRelease(kDevice)), "CUDA_ERROR_INVALID_CONTEXT");

  // Retained again: the same handle, and more work in it succeeds.
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&retained, kDevice), CUDA_SUCCESS);
  EXPECT_EQ(retained, primary);
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  Work second;
  do_work(second);

  // A second retain is one more reference; the last release deactivates.
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&retained, kDevice), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRelease(kDevice), CUDA_SUCCESS);
  EXPECT_EQ(active_state(), 1);
  ASSERT_EQ(cuDevicePrimaryCtxRelease(kDevice), CUDA_SUCCESS);
  EXPECT_EQ(active_state(), 0);
  ASSERT_EQ(cuCtxSetCurrent(probe), CUDA_SUCCESS);
  EXPECT_EQ(used_bytes(), before);
  expect_gone(second);

  ASSERT_EQ(cuCtxDestroy(probe), CUDA_SUCCESS);
}

TEST(PrimaryContext, AnExplicitContextTakesItsStateWithIt) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext probe = nullptr, ctx = nullptr;
  ASSERT_EQ(cuCtxCreate(&probe, nullptr, 0, kDevice), CUDA_SUCCESS);
  const uint64_t before = used_bytes();
  ASSERT_EQ(cuCtxCreate(&ctx, nullptr, 0, kDevice), CUDA_SUCCESS);
  Work w;
  do_work(w);
  ASSERT_EQ(cuCtxDestroy(ctx), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(probe), CUDA_SUCCESS);
  EXPECT_EQ(used_bytes(), before);
  expect_gone(w);
  ASSERT_EQ(cuCtxDestroy(probe), CUDA_SUCCESS);
}

}  // namespace
