// context_end_probe: contexts that end with their work still queued (linked
// with -lcuda, run with the shim preloaded). Each round makes a context
// (--how destroy: cuCtxCreate; reset and release: the primary context,
// retained), two streams in it, launches --kernels spin kernels across them,
// lets the gate's poller record and wait on them for a while (0 to 1 ms,
// varying with the round), and ends the context under the work: cuCtxDestroy,
// cuDevicePrimaryCtxReset, or the primary context's last release. Every
// round ends one context that the launch gate tracked. Prints one JSON line:
// {"rounds", "launches", "errors"}.
#include <cuda.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "probe_driver.hpp"
#include "samples/spin_kernel_ptx.hpp"

namespace {

using probe::expect;

void sleep_us(long us) {
  timespec ts{.tv_sec = 0, .tv_nsec = us * 1000};
  nanosleep(&ts, nullptr);
}

}  // namespace

int main(int argc, char** argv) try {
  std::string how = "destroy";
  double seconds = 2;
  int kernels = 16;
  std::uint64_t kernel_us = 300;
  CLI::App app{"contexts that end with their work still queued"};
  app.add_option("--how", how, "destroy, reset or release")
      ->check(CLI::IsMember({"destroy", "reset", "release"}));
  app.add_option("--seconds", seconds, "keep making and ending contexts for this long");
  app.add_option("--kernels", kernels, "kernels launched in each context")
      ->check(CLI::Range(1, 4096));
  app.add_option("--kernel-us", kernel_us, "duration of each kernel");
  CLI11_PARSE(app, argc, argv);

  expect(cuInit(0), "cuInit");
  CUdevice dev = 0;
  expect(cuDeviceGet(&dev, 0), "cuDeviceGet");
  std::uint64_t rounds = 0, launches = 0, errors = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    CUcontext ctx = nullptr;
    if (how == "destroy") {
      CUctxCreateParams params{};
      expect(cuCtxCreate(&ctx, &params, CU_CTX_SCHED_BLOCKING_SYNC, dev), "cuCtxCreate");
    } else {
      expect(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
      expect(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    }
    CUmodule module = nullptr;
    expect(cuModuleLoadData(&module, samples::kSpinKernelPtx), "cuModuleLoadData");
    CUfunction spin = nullptr;
    expect(cuModuleGetFunction(&spin, module, "spin"), "cuModuleGetFunction");
    CUstream streams[2] = {};
    for (CUstream& s : streams)
      expect(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    // Every third round waits for its first kernel: the next launch starts a
    // spell, whose probe events the end must forget too.
    for (int i = 0; i < kernels; ++i) {
      std::uint64_t ns = kernel_us * 1000;
      void* params[] = {&ns};
      const CUresult r = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, streams[i % 2], params, nullptr);
      if (r != CUDA_SUCCESS) {
        ++errors;
        std::fprintf(stderr, "context_end_probe: cuLaunchKernel: %s\n", probe::name_of(r).c_str());
        break;
      }
      ++launches;
      if (i == 0 && rounds % 3 == 0) expect(cuStreamSynchronize(streams[0]), "cuStreamSynchronize");
    }
    // The poller records the tail a batch interval after the last launch
    // and then waits on it: the end comes before, during or after that.
    sleep_us(static_cast<long>((rounds * 137) % 1000));
    if (how == "destroy") {
      expect(cuCtxDestroy(ctx), "cuCtxDestroy");
    } else if (how == "reset") {
      expect(cuDevicePrimaryCtxReset(dev), "cuDevicePrimaryCtxReset");
    } else {
      expect(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
      unsigned flags = 0;
      int active = 1;
      expect(cuDevicePrimaryCtxGetState(dev, &flags, &active), "cuDevicePrimaryCtxGetState");
      if (active) probe::fail("the primary context is still active after its last release");
    }
    ++rounds;
  }
  std::printf("%s\n", nlohmann::json{{"rounds", rounds}, {"launches", launches}, {"errors", errors}}
                          .dump()
                          .c_str());
  return errors ? 3 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "context_end_probe: %s\n", e.what());
  return 2;
}
