// stream_cover_probe: after a warm-up of short kernels, one long kernel on
// one stream, then short ones on another, synchronised every few, then a wait
// for the long one (linked with -lcuda, run with the shim preloaded), with a
// host pause between the long kernel and the short ones if asked. A GPU
// runs the two streams side by side, so the short ones end long before the
// long one: a batch of launches the launch gate took as done once its record
// on the short kernels' stream completed would publish the long kernel's work
// as drained while it still runs. The caller samples the allocation's drain
// mark meanwhile and holds it against the long kernel's submission
// (shim_cases.py, stream_cover).
// Prints one JSON line: {"long_before_ns", "long_after_ns" (CLOCK_MONOTONIC
// around the long kernel's launch), "long_us", "short_launches",
// "short_phase_ns" (from the long kernel's launch to the last short one's
// synchronisation), "long_pending_after_short" (whether the long kernel was
// still running then)}.
#include <cuda.h>
#include <time.h>

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

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

CUresult launch_spin(CUfunction spin, CUstream stream, std::uint64_t us) {
  std::uint64_t ns = us * 1000;
  void* params[] = {&ns};
  return cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
}

// "legacy" is the legacy default stream (NULL), "per-thread" the calling
// thread's default stream; otherwise a stream made here.
CUstream make_stream(const std::string& kind) {
  if (kind == "legacy") return nullptr;
  if (kind == "per-thread") return CU_STREAM_PER_THREAD;
  CUstream s = nullptr;
  expect(cuStreamCreate(&s, kind == "blocking" ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING),
         "cuStreamCreate");
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  std::uint64_t long_us = 1'000'000;
  std::uint64_t short_us = 100;
  int short_launches = 2;
  int sync_every = 2;
  int warmup = 200;
  std::uint64_t pause_us = 0;
  std::string warmup_on = "short";
  std::string long_stream = "non-blocking";
  std::string short_stream = "non-blocking";
  CLI::App app{"a long kernel on one stream, short ones synchronised on another"};
  app.add_option("--long-us", long_us, "the long kernel's duration");
  app.add_option("--short-us", short_us, "each short kernel's duration");
  app.add_option("--short-launches", short_launches, "short kernels")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--sync-every", sync_every, "cuStreamSynchronize of theirs after this many")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--warmup", warmup,
                 "short kernels, synchronised, before the long one (a gate that has measured "
                 "none holds launches until its first batch ends)")
      ->check(CLI::Range(0, 1'000'000));
  app.add_option("--pause-us", pause_us,
                 "host time between the long kernel's launch and the first short one (the "
                 "gate's poller records a tail left this long on its own)");
  app.add_option("--warmup-on", warmup_on,
                 "the warm-up's stream: the short kernels' or the long one's (then nothing but "
                 "the long kernel's stream has work between the warm-up's sync and it)")
      ->check(CLI::IsMember({"short", "long"}));
  const std::vector<std::string> kinds{"blocking", "non-blocking", "legacy", "per-thread"};
  app.add_option("--long-stream", long_stream, "the long kernel's stream")
      ->check(CLI::IsMember(kinds));
  app.add_option("--short-stream", short_stream, "the short kernels' stream")
      ->check(CLI::IsMember(kinds));
  CLI11_PARSE(app, argc, argv);
  if (long_stream == short_stream && (long_stream == "legacy" || long_stream == "per-thread"))
    probe::fail("the two kernels need streams of their own");

  probe::start();
  CUmodule module = nullptr;
  expect(cuModuleLoadData(&module, samples::kSpinKernelPtx), "cuModuleLoadData");
  CUfunction spin = nullptr;
  expect(cuModuleGetFunction(&spin, module, "spin"), "cuModuleGetFunction");
  CUstream long_s = make_stream(long_stream);
  CUstream short_s = make_stream(short_stream);

  for (int i = 1; i <= warmup; ++i) {
    expect(launch_spin(spin, warmup_on == "long" ? long_s : short_s, short_us),
           "a warm-up cuLaunchKernel");
    if (i % sync_every == 0 || i == warmup) expect(cuCtxSynchronize(), "cuCtxSynchronize");
  }

  const std::uint64_t before = monotonic_ns();
  expect(launch_spin(spin, long_s, long_us), "the long cuLaunchKernel");
  const std::uint64_t after = monotonic_ns();
  if (pause_us != 0) {
    const timespec pause{.tv_sec = static_cast<time_t>(pause_us / 1'000'000),
                         .tv_nsec = static_cast<long>(pause_us % 1'000'000 * 1000)};
    nanosleep(&pause, nullptr);
  }
  for (int i = 1; i <= short_launches; ++i) {
    expect(launch_spin(spin, short_s, short_us), "a short cuLaunchKernel");
    if (i % sync_every == 0 || i == short_launches)
      expect(cuStreamSynchronize(short_s), "cuStreamSynchronize of the short kernels");
  }
  const std::uint64_t short_done = monotonic_ns();
  const CUresult long_state = cuStreamQuery(long_s);
  if (long_state != CUDA_SUCCESS && long_state != CUDA_ERROR_NOT_READY)
    probe::fail("cuStreamQuery of the long kernel: " + probe::name_of(long_state));
  expect(cuStreamSynchronize(long_s), "cuStreamSynchronize of the long kernel");
  std::printf("%s\n",
              nlohmann::json{{"long_before_ns", before},
                             {"long_after_ns", after},
                             {"long_us", long_us},
                             {"short_launches", short_launches},
                             {"short_phase_ns", short_done - after},
                             {"long_pending_after_short", long_state == CUDA_ERROR_NOT_READY}}
                  .dump()
                  .c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "stream_cover_probe: %s\n", e.what());
  return 2;
}
