// context_end_probe: contexts that end with their work still queued (linked
// with -lcuda, run with the shim preloaded). Each round makes a context
// (--how destroy: cuCtxCreate; reset and release: the primary context,
// retained), two streams in it, launches --kernels spin kernels across them,
// lets the gate's poller record and wait on them for a while (0 to 1 ms,
// varying with the round), and ends the context under the work: cuCtxDestroy,
// cuDevicePrimaryCtxReset (then the round's reference goes back, as the
// driver's documentation asks of those who retained), or the primary
// context's last release. Every round ends one context that the launch gate
// tracked. With --extra-reference (release) each round holds two references
// and gives one back halfway through its launches, an end that does not end
// the context; with --threads N (release) N threads each retain, launch on
// streams of their own and release at once, so several ends of one context
// overlap; with --idle-every N every Nth round synchronises its work before
// the end.
//
// Prints one JSON line: {"rounds", "launches", "errors", "handle_changes",
// "release_after_reset", "end_call_us"}: how many rounds retained another
// primary context handle than the round before (reset and release); how the
// driver answered the release after a reset (the last round's answer, and
// how many rounds had another than CUDA_SUCCESS); the median and longest time
// the ending call took (destroy, reset, and release with one thread), for
// rounds that ended with work queued and for those that synchronised first:
// whether the driver's end waits for the queued work.
#include <cuda.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <algorithm>

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

struct Options {
  std::string how = "destroy";
  double seconds = 2;
  int kernels = 16;
  std::uint64_t kernel_us = 300;
  bool extra_reference = false;
  int threads = 1;
  int idle_every = 0;

  // Whether round `round` synchronises its work before the context's end.
  bool idle_round(std::uint64_t round) const {
    return idle_every > 0 && round % static_cast<std::uint64_t>(idle_every) ==
                                 static_cast<std::uint64_t>(idle_every) - 1;
  }
};

struct Counts {
  std::atomic<std::uint64_t> launches{0};
  std::atomic<std::uint64_t> errors{0};
};

// The ending calls' durations, in microseconds: ends with work queued, and
// ends after a synchronisation.
class EndCallTimes {
 public:
  template <typename Call>
  void time(bool idle, Call&& call) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const auto us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lock(mutex_);
    (idle ? idle_us_ : queued_us_).push_back(us);
  }

  nlohmann::json summary() {
    std::lock_guard lock(mutex_);
    if (queued_us_.empty() && idle_us_.empty()) return nullptr;
    return {{"queued", summary_of(queued_us_)}, {"idle", summary_of(idle_us_)}};
  }

 private:
  static nlohmann::json summary_of(std::vector<double>& us) {
    if (us.empty()) return nullptr;
    std::sort(us.begin(), us.end());
    return {{"median", us[us.size() / 2]}, {"max", us.back()}, {"n", us.size()}};
  }

  std::mutex mutex_;
  std::vector<double> queued_us_;
  std::vector<double> idle_us_;
};

// One thread's part of a round in `ctx` (current on this thread): a module,
// two streams, the kernels across them, a pause that lets the gate's poller
// record and wait on them (0 to 1 ms, varying with the round and thread).
void launch_round(const Options& o, CUdevice dev, std::uint64_t round, int thread, Counts& counts) {
  CUmodule module = nullptr;
  expect(cuModuleLoadData(&module, samples::kSpinKernelPtx), "cuModuleLoadData");
  CUfunction spin = nullptr;
  expect(cuModuleGetFunction(&spin, module, "spin"), "cuModuleGetFunction");
  CUstream streams[2] = {};
  for (CUstream& s : streams) expect(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  for (int i = 0; i < o.kernels; ++i) {
    std::uint64_t ns = o.kernel_us * 1000;
    void* params[] = {&ns};
    const CUresult r = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, streams[i % 2], params, nullptr);
    if (r != CUDA_SUCCESS) {
      ++counts.errors;
      std::fprintf(stderr, "context_end_probe: cuLaunchKernel: %s\n", probe::name_of(r).c_str());
      break;
    }
    ++counts.launches;
    // Every third round waits for its first kernel: the next launch starts a
    // spell, whose probe events the end must forget too.
    if (i == 0 && round % 3 == 0) expect(cuStreamSynchronize(streams[0]), "cuStreamSynchronize");
    if (o.extra_reference && i == o.kernels / 2)
      expect(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
  }
  // The poller records the tail a batch interval after the last launch and
  // then waits on it: the end comes before, during or after that.
  sleep_us(static_cast<long>((round * 137 + static_cast<std::uint64_t>(thread) * 311) % 1000));
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  CLI::App app{"contexts that end with their work still queued"};
  app.add_option("--how", o.how, "destroy, reset or release")
      ->check(CLI::IsMember({"destroy", "reset", "release"}));
  app.add_option("--seconds", o.seconds, "keep making and ending contexts for this long");
  app.add_option("--kernels", o.kernels, "kernels launched in each context")
      ->check(CLI::Range(1, 4096));
  app.add_option("--kernel-us", o.kernel_us, "duration of each kernel");
  app.add_flag("--extra-reference", o.extra_reference,
               "release: retain twice, and release once halfway through the launches");
  app.add_option("--idle-every", o.idle_every,
                 "every this many rounds, synchronise the work before the end (0: never)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--threads", o.threads,
                 "release: this many threads each retain the primary context, launch in it and "
                 "release it, all at once")
      ->check(CLI::Range(1, 16));
  CLI11_PARSE(app, argc, argv);
  if (o.threads > 1 && o.how != "release") {
    std::fprintf(stderr, "context_end_probe: --threads needs --how release\n");
    return 2;
  }

  expect(cuInit(0), "cuInit");
  CUdevice dev = 0;
  expect(cuDeviceGet(&dev, 0), "cuDeviceGet");
  Counts counts;
  EndCallTimes end_calls;
  std::uint64_t rounds = 0;
  std::uint64_t handle_changes = 0;
  CUcontext last_primary = nullptr;
  std::uint64_t release_after_reset_errors = 0;
  std::string release_after_reset = "not made";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (o.how == "destroy") {
      CUcontext ctx = nullptr;
      CUctxCreateParams params{};
      expect(cuCtxCreate(&ctx, &params, CU_CTX_SCHED_BLOCKING_SYNC, dev), "cuCtxCreate");
      launch_round(o, dev, rounds, 0, counts);
      const bool idle = o.idle_round(rounds);
      if (idle) expect(cuCtxSynchronize(), "cuCtxSynchronize");
      end_calls.time(idle, [&] { expect(cuCtxDestroy(ctx), "cuCtxDestroy"); });
    } else {
      // Each thread holds a reference (two with --extra-reference, one
      // given back halfway) and gives it back at the end: the last release
      // ends the context, whichever thread makes it.
      const bool idle = o.idle_round(rounds);
      std::vector<std::thread> threads;
      threads.reserve(static_cast<std::size_t>(o.threads));
      for (int t = 0; t < o.threads; ++t) {
        threads.emplace_back([&, t] {
          CUcontext ctx = nullptr;
          expect(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
          if (t == 0) {
            if (last_primary != nullptr && ctx != last_primary) ++handle_changes;
            last_primary = ctx;
          }
          expect(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
          if (o.extra_reference)
            expect(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
          launch_round(o, dev, rounds, t, counts);
          if (idle) expect(cuCtxSynchronize(), "cuCtxSynchronize");
          if (o.how != "release") return;
          const auto release = [&] {
            expect(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
          };
          if (o.threads == 1)
            end_calls.time(idle, release);
          else
            release();
        });
      }
      for (auto& t : threads) t.join();
      if (o.how == "reset") {
        end_calls.time(idle,
                       [&] { expect(cuDevicePrimaryCtxReset(dev), "cuDevicePrimaryCtxReset"); });
        // The driver's documentation: a reset does not release, and a
        // release after it is safe. Its answer is reported, not judged.
        const CUresult rc = cuDevicePrimaryCtxRelease(dev);
        release_after_reset = probe::name_of(rc);
        if (rc != CUDA_SUCCESS) ++release_after_reset_errors;
      }
      unsigned flags = 0;
      int active = 1;
      expect(cuDevicePrimaryCtxGetState(dev, &flags, &active), "cuDevicePrimaryCtxGetState");
      if (active) probe::fail("the primary context is still active after its end");
    }
    ++rounds;
  }
  std::printf("%s\n", nlohmann::json{{"rounds", rounds},
                                     {"launches", counts.launches.load()},
                                     {"errors", counts.errors.load()},
                                     {"handle_changes", handle_changes},
                                     {"release_after_reset",
                                      o.how == "reset"
                                          ? nlohmann::json{{"last", release_after_reset},
                                                           {"errors", release_after_reset_errors}}
                                          : nlohmann::json(nullptr)},
                                     {"end_call_us", end_calls.summary()}}
                          .dump()
                          .c_str());
  return counts.errors ? 3 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "context_end_probe: %s\n", e.what());
  return 2;
}
