// spin_worker: launches `spin` kernels of a chosen duration for a wall time (or
// a count), on one or more streams and threads, then prints one JSON line:
//   {"launches":N,"seconds":S,"kernels_per_s":K,...}
// The kernel is real PTX (busy-wait on %globaltimer), so the same binary runs on
// a GPU (real libcuda.so.1) and on fakegpu (LD_LIBRARY_PATH=build/fakegpu).
#include <cuda.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "samples/common.hpp"
#include "samples/spin_kernel_ptx.hpp"

namespace {

struct Options {
  double kernel_us = 1000;
  double seconds = 0;
  uint64_t count = 0;
  int streams = 1;
  int threads = 1;
  int device = 0;
  bool explicit_context = false;
  bool events = false;
};

struct Shared {
  std::atomic<uint64_t> launches{0};
  std::mutex error_mu;
  std::string first_error;
  std::atomic<uint64_t> errors{0};
};

void record_error(Shared& shared, CUresult r, const char* what) {
  shared.errors++;
  std::lock_guard<std::mutex> guard(shared.error_mu);
  if (shared.first_error.empty())
    shared.first_error = std::string(what) + ": " + samples::error_name(r);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Launch busy-wait kernels and report the launch rate as JSON"};
  app.add_option("--kernel-us", o.kernel_us, "duration of each kernel in microseconds")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seconds", o.seconds, "keep launching for this wall time")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--count", o.count, "launch this many kernels in total (instead of --seconds)");
  app.add_option("--streams", o.streams, "streams per thread")->check(CLI::Range(1, 64));
  app.add_option("--threads", o.threads, "launching threads")->check(CLI::Range(1, 64));
  app.add_option("--device", o.device, "device ordinal")->check(CLI::NonNegativeNumber);
  app.add_flag("--explicit-context", o.explicit_context,
               "use cuCtxCreate instead of the primary context");
  app.add_flag("--events", o.events,
               "time the run with events on the first stream (one thread) and report gpu_ms");
  CLI11_PARSE(app, argc, argv);
  if (o.seconds <= 0 && o.count == 0) o.seconds = 1;

  samples::check(cuInit(0), "cuInit");
  CUdevice dev;
  samples::check(cuDeviceGet(&dev, o.device), "cuDeviceGet");
  CUcontext ctx;
  if (o.explicit_context) {
    CUctxCreateParams params{};
    samples::check(cuCtxCreate(&ctx, &params, 0, dev), "cuCtxCreate");
  } else {
    samples::check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    samples::check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  }
  CUmodule module;
  samples::check(cuModuleLoadData(&module, samples::kSpinKernelPtx), "cuModuleLoadData");
  CUfunction spin;
  samples::check(cuModuleGetFunction(&spin, module, "spin"), "cuModuleGetFunction(spin)");

  const uint64_t kernel_ns = static_cast<uint64_t>(o.kernel_us * 1000.0);
  Shared shared;
  CUevent start_event = nullptr, stop_event = nullptr;
  const bool timed = o.events && o.threads == 1;

  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(o.seconds));
  auto worker = [&](int index) {
    samples::check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    std::vector<CUstream> streams(static_cast<size_t>(o.streams));
    for (auto& s : streams)
      samples::check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    if (timed && index == 0) {
      samples::check(cuEventCreate(&start_event, CU_EVENT_DEFAULT), "cuEventCreate");
      samples::check(cuEventCreate(&stop_event, CU_EVENT_DEFAULT), "cuEventCreate");
      samples::check(cuEventRecord(start_event, streams[0]), "cuEventRecord");
    }
    uint64_t ns = kernel_ns;
    void* params[] = {&ns};
    for (size_t i = 0;; ++i) {
      if (o.count) {
        if (shared.launches.fetch_add(1) >= o.count) {
          shared.launches--;
          break;
        }
      } else if (std::chrono::steady_clock::now() >= deadline) {
        break;
      }
      CUresult r =
          cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, streams[i % streams.size()], params, nullptr);
      if (r != CUDA_SUCCESS) {
        if (o.count) shared.launches--;
        record_error(shared, r, "cuLaunchKernel");
        break;
      }
      if (!o.count) shared.launches++;
    }
    if (timed && index == 0) samples::check(cuEventRecord(stop_event, streams[0]), "cuEventRecord");
    for (auto& s : streams) {
      if (CUresult r = cuStreamSynchronize(s); r != CUDA_SUCCESS)
        record_error(shared, r, "cuStreamSynchronize");
      cuStreamDestroy(s);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  nlohmann::json out{
      {"pid", getpid()},
      {"launches", shared.launches.load()},
      {"seconds", elapsed},
      {"kernels_per_s", elapsed > 0 ? static_cast<double>(shared.launches.load()) / elapsed : 0.0},
      {"kernel_ns", kernel_ns},
      {"streams", o.streams},
      {"threads", o.threads},
      {"errors", shared.errors.load()}};
  if (!shared.first_error.empty()) out["first_error"] = shared.first_error;
  if (timed) {
    float ms = 0;
    if (CUresult r = cuEventElapsedTime(&ms, start_event, stop_event); r == CUDA_SUCCESS) {
      out["gpu_ms"] = ms;
    } else {
      out["gpu_ms_error"] = samples::error_name(r);
    }
  }
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  cuModuleUnload(module);
  if (o.explicit_context) {
    cuCtxDestroy(ctx);
  } else {
    cuDevicePrimaryCtxRelease(dev);
  }
  return shared.errors.load() ? 2 : 0;
}
