// Launch gate cost: ns per cuLaunchKernel through libcushare.so (holding the
// lease, fast path) vs. the driver's own cuLaunchKernel, in the same process
// and run, alternating rounds. Run under LD_PRELOAD=libcushare.so with a
// cushared granting the lease (tests/bench/scheduler/run_bench.py does).
// Prints one JSON line.
//
//   gate_bench [rounds] [launches per round] [sync every N launches]
//
// With a sync every launch each launch is the first of a spell (the queue
// drained before it): the gate's spell-start bookkeeping is in the figure.
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gate_bench_ptx.hpp"

namespace {

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "gate_bench: %s failed (%d)\n", what, static_cast<int>(r));
    std::exit(1);
  }
}

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**, void**);

double ns_per_launch(LaunchFn launch, CUfunction f, CUstream s, int n, int sync_every) {
  unsigned long long ns = 0;
  void* params[] = {&ns};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    check(launch(f, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr), "launch");
    if (sync_every > 0 && (i + 1) % sync_every == 0)
      check(cuStreamSynchronize(s), "cuStreamSynchronize");
  }
  const auto t1 = std::chrono::steady_clock::now();
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 300;
  const int per_round = argc > 2 ? std::atoi(argv[2]) : 2000;
  const int sync_every = argc > 3 ? std::atoi(argv[3]) : 0;
  check(cuInit(0), "cuInit");
  CUdevice dev;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUmodule mod;
  check(cuModuleLoadData(&mod, kGateBenchPtx), "cuModuleLoadData");
  CUfunction spin;
  check(cuModuleGetFunction(&spin, mod, "spin"), "cuModuleGetFunction");
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  // The driver's own function, past the shim: glibc's dlsym (the shim hooks
  // the public one) on the libcuda.so.1 handle.
  using DlsymFn = void* (*)(void*, const char*);
  auto glibc_dlsym = reinterpret_cast<DlsymFn>(dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34"));
  if (!glibc_dlsym)
    glibc_dlsym = reinterpret_cast<DlsymFn>(dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5"));
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto direct =
      glibc_dlsym && lib ? reinterpret_cast<LaunchFn>(glibc_dlsym(lib, "cuLaunchKernel")) : nullptr;
  LaunchFn through_shim = &cuLaunchKernel;
  if (!direct) {
    std::fprintf(stderr, "gate_bench: cannot find the driver's cuLaunchKernel\n");
    return 1;
  }
  const bool shimmed = reinterpret_cast<void*>(direct) != reinterpret_cast<void*>(through_shim);

  // Warm-up (at least 50 ms): the first launches start the poller, learn the
  // kernel time, get the lease and calibrate the gate's counter clock.
  const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  int warm_rounds = 0;  // printed: a profile of the whole run divides by every launch
  for (; warm_rounds < 3 || std::chrono::steady_clock::now() < warm_until; ++warm_rounds) {
    ns_per_launch(through_shim, spin, s, per_round, sync_every);
    ns_per_launch(direct, spin, s, per_round, sync_every);
  }
  std::vector<double> shim_ns, direct_ns, diff;
  for (int r = 0; r < rounds; ++r) {
    const double d = ns_per_launch(direct, spin, s, per_round, sync_every);
    const double w = ns_per_launch(through_shim, spin, s, per_round, sync_every);
    direct_ns.push_back(d);
    shim_ns.push_back(w);
    diff.push_back(w - d);
  }
  std::printf(
      "{\"shimmed\":%s,\"rounds\":%d,\"warm_up_rounds\":%d,\"launches_per_round\":%d,"
      "\"sync_every\":%d,"
      "\"direct_ns\":%.1f,"
      "\"shim_ns\":%.1f,\"added_ns_median\":%.1f,\"added_ns_min\":%.1f}\n",
      shimmed ? "true" : "false", rounds, warm_rounds, per_round, sync_every, median(direct_ns),
      median(shim_ns), median(diff), *std::min_element(diff.begin(), diff.end()));
  return 0;
}
