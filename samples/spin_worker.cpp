// spin_worker: launches `spin` kernels for a wall time, a count, or until
// SIGTERM/SIGINT, on one or more streams and threads, then prints one JSON line:
//   {"launches":N,"seconds":S,"kernels_per_s":K,...}
// The kernel is real PTX (busy-wait on %globaltimer), so the same binary runs on
// a GPU (real libcuda.so.1) and on fakegpu (LD_LIBRARY_PATH=build/fakegpu).
#include <cuda.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "samples/common.hpp"
#include "samples/spin_kernel_ptx.hpp"

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) {
  g_stop.store(true);
}

struct Options {
  std::vector<double> kernel_us{1000};
  bool random_durations = false;
  unsigned seed = 1;
  double seconds = 0;
  uint64_t count = 0;
  int streams = 1;
  int threads = 1;
  int device = 0;
  int inflight = 0;
  uint64_t alloc_mib = 0;
  bool explicit_context = false;
  bool events = false;
  int sync_every = 0;        // cuCtxSynchronize after this many launches of a thread
  int copy_every = 0;        // a synchronous cuMemcpyDtoH after this many launches of a thread
  double host_gap_us = 0;    // CPU work after each synchronisation (a training step's host part)
  int poll_every = 0;        // poll until the stream is idle after this many launches of a thread
  bool poll_event = false;   // poll an event recorded behind the kernel instead of the stream
  double poll_sleep_us = 0;  // sleep between two queries (0: yield the CPU)
  bool per_thread_stream = false;  // each thread on its own default stream (the _ptsz entries)
  int churn_streams = 0;  // destroy a stream (its work still queued) after this many launches on it
};

// The stream-ordered calls the workers make. A program built for per-thread
// default streams (nvcc --default-stream per-thread) reaches the driver
// through the _ptsz/_ptds entry points, which its runtime resolves with
// cuGetProcAddress; there stream 0 is the calling thread's own stream.
struct StreamCalls {
  decltype(&cuLaunchKernel) launch = cuLaunchKernel;
  decltype(&cuStreamSynchronize) stream_sync = cuStreamSynchronize;
  decltype(&cuStreamQuery) stream_query = cuStreamQuery;
  decltype(&cuEventRecord) event_record = cuEventRecord;
  decltype(&cuMemcpyDtoH) memcpy_dtoh = cuMemcpyDtoH;
};

template <typename Fn>
void resolve_per_thread(const char* symbol, Fn& fn) {
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status{};
  samples::check(cuGetProcAddress(symbol, &pfn, CUDA_VERSION,
                                  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status),
                 symbol);
  if (status != CU_GET_PROC_ADDRESS_SUCCESS || pfn == nullptr) {
    std::fprintf(stderr, "spin_worker: no per-thread entry point for %s\n", symbol);
    std::exit(1);
  }
  fn = reinterpret_cast<Fn>(pfn);
}

StreamCalls per_thread_stream_calls() {
  StreamCalls calls;
  resolve_per_thread("cuLaunchKernel", calls.launch);
  resolve_per_thread("cuStreamSynchronize", calls.stream_sync);
  resolve_per_thread("cuStreamQuery", calls.stream_query);
  resolve_per_thread("cuEventRecord", calls.event_record);
  resolve_per_thread("cuMemcpyDtoH", calls.memcpy_dtoh);
  return calls;
}

struct Shared {
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> kernel_ns_total{0};
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

// Picks kernel durations: the --kernel-us list in turn, or uniformly at random
// between its smallest and largest value with --random.
class Durations {
 public:
  Durations(const Options& o, int thread) : o_(o), rng_(o.seed + static_cast<unsigned>(thread)) {
    lo_ = *std::min_element(o.kernel_us.begin(), o.kernel_us.end());
    hi_ = *std::max_element(o.kernel_us.begin(), o.kernel_us.end());
  }
  uint64_t next_ns() {
    double us = o_.random_durations ? std::uniform_real_distribution<double>(lo_, hi_)(rng_)
                                    : o_.kernel_us[i_++ % o_.kernel_us.size()];
    return static_cast<uint64_t>(us * 1000.0);
  }

 private:
  const Options& o_;
  std::mt19937_64 rng_;
  double lo_, hi_;
  size_t i_ = 0;
};

// Host work between steps: the CPU busy, no GPU work submitted.
void spin_cpu(double us) {
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double, std::micro>(us));
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Polls until the work queued on `stream` so far completed, as a serving
// loop that never blocks in the driver does: between queries it sleeps
// `sleep_us` (0: yields the CPU). With `event`, polls an event recorded
// behind that work.
CUresult poll_until_idle(const StreamCalls& calls, CUstream stream, bool event, double sleep_us) {
  thread_local CUevent marker = nullptr;
  if (event) {
    if (!marker) {
      if (CUresult r = cuEventCreate(&marker, CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) return r;
    }
    if (CUresult r = calls.event_record(marker, stream); r != CUDA_SUCCESS) return r;
  }
  for (;;) {
    const CUresult r = event ? cuEventQuery(marker) : calls.stream_query(stream);
    if (r != CUDA_ERROR_NOT_READY) return r;
    if (sleep_us > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(sleep_us));
    else
      std::this_thread::yield();
  }
}

}  // namespace

// An exception (a bad argument CLI11 lets through, a JSON error) ends the
// program with a message and exit status 2, not an abort.
int main(int argc, char** argv) try {
  Options o;
  CLI::App app{"Launch busy-wait kernels and report the launch rate as JSON"};
  app.add_option("--kernel-us", o.kernel_us,
                 "kernel duration(s) in microseconds; a list (50,20000) is used in turn")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--random", o.random_durations,
               "draw durations uniformly between the smallest and largest --kernel-us");
  app.add_option("--seed", o.seed, "random seed for --random");
  app.add_option("--seconds", o.seconds, "keep launching for this wall time")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--count", o.count, "launch this many kernels in total");
  app.add_option("--streams", o.streams, "streams per thread")->check(CLI::Range(1, 64));
  app.add_option("--threads", o.threads, "launching threads")->check(CLI::Range(1, 64));
  app.add_option("--device", o.device, "device ordinal")->check(CLI::NonNegativeNumber);
  app.add_option("--inflight", o.inflight,
                 "at most this many kernels queued per stream (waits on the oldest); 0 = as many "
                 "as the driver takes")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--alloc-mib", o.alloc_mib, "cuMemAlloc this many MiB first (exit 2 if it fails)");
  app.add_flag("--explicit-context", o.explicit_context,
               "use cuCtxCreate instead of the primary context");
  app.add_option("--sync-every", o.sync_every,
                 "cuCtxSynchronize after every N launches of a thread (a step ending in a copy "
                 "back); 0 = never")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--copy-every", o.copy_every,
                 "cuMemcpyDtoH 4 bytes back after every N launches of a thread (a synchronous "
                 "copy: it waits for the work before it); 0 = never")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--host-gap-us", o.host_gap_us,
                 "busy CPU work of this many microseconds after each synchronisation (with "
                 "--sync-every) or after every launch")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--poll-every", o.poll_every,
                 "after every N launches of a thread, poll with cuStreamQuery until the stream "
                 "is idle (a wait that never blocks in the driver); 0 = never")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--poll-event", o.poll_event,
               "with --poll-every: poll an event recorded behind the kernel (cuEventQuery)");
  app.add_option("--poll-sleep-us", o.poll_sleep_us,
                 "with --poll-every: sleep this long between two queries (0: yield the CPU)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--per-thread-stream", o.per_thread_stream,
               "launch, wait and copy on each thread's per-thread default stream (stream 0 of "
               "the _ptsz entry points, as a program built with --default-stream per-thread "
               "does); --sync-every then synchronises that stream");
  app.add_option("--churn-streams", o.churn_streams,
                 "destroy each stream after this many launches on it, its work still queued, and "
                 "go on with a new one; 0 = never")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--events", o.events,
               "time the run with events on the first stream (one thread) and report gpu_ms");
  CLI11_PARSE(app, argc, argv);
  if (o.per_thread_stream && o.streams != 1) {
    std::fprintf(stderr, "spin_worker: --per-thread-stream uses one stream per thread\n");
    return 2;
  }
  if (o.churn_streams > 0 &&
      (o.per_thread_stream || o.copy_every > 0 || o.inflight > 0 || (o.events && o.threads == 1))) {
    std::fprintf(stderr,
                 "spin_worker: --churn-streams needs streams of its own (not --per-thread-stream, "
                 "--copy-every, --inflight or --events)\n");
    return 2;
  }
  // Neither --seconds nor --count: run until SIGTERM/SIGINT.
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  samples::check(cuInit(0), "cuInit");
  CUdevice dev;
  samples::check(cuDeviceGet(&dev, o.device), "cuDeviceGet");
  CUcontext ctx;
  // Blocking sync: waiting threads sleep instead of spinning (2-core CI machines).
  if (o.explicit_context) {
    CUctxCreateParams params{};
    samples::check(cuCtxCreate(&ctx, &params, CU_CTX_SCHED_BLOCKING_SYNC, dev), "cuCtxCreate");
  } else {
    cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC);
    samples::check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    samples::check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  }
  CUdeviceptr buffer = 0;
  if (o.alloc_mib) {
    if (CUresult r = cuMemAlloc(&buffer, o.alloc_mib << 20); r != CUDA_SUCCESS) {
      std::fprintf(stderr, "spin_worker: cuMemAlloc(%llu MiB) failed: %s\n",
                   static_cast<unsigned long long>(o.alloc_mib), samples::error_name(r).c_str());
      return 2;
    }
  }
  CUdeviceptr copy_src = 0;  // what --copy-every copies back
  if (o.copy_every > 0) samples::check(cuMemAlloc(&copy_src, 4), "cuMemAlloc");
  CUmodule module;
  samples::check(cuModuleLoadData(&module, samples::kSpinKernelPtx), "cuModuleLoadData");
  CUfunction spin;
  samples::check(cuModuleGetFunction(&spin, module, "spin"), "cuModuleGetFunction(spin)");
  const StreamCalls calls = o.per_thread_stream ? per_thread_stream_calls() : StreamCalls{};

  Shared shared;
  CUevent start_event = nullptr, stop_event = nullptr;
  const bool timed = o.events && o.threads == 1;
  const bool until_signal = o.seconds <= 0 && o.count == 0;

  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(o.seconds));
  auto worker = [&](int index) {
    samples::check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    std::vector<CUstream> streams(static_cast<size_t>(o.streams));
    // A step that ends in a copy back runs on the legacy default stream, as
    // a CUDA C program's kernel<<<...>>> and cudaMemcpy do: the copy waits
    // for the kernels before it. With --per-thread-stream, stream 0 is the
    // thread's own default stream.
    for (auto& s : streams) {
      if (o.copy_every == 0 && !o.per_thread_stream)
        samples::check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    }
    std::vector<std::deque<CUevent>> pending(streams.size());
    std::vector<int> on_stream(streams.size(), 0);  // launches on each since it was made
    if (timed && index == 0) {
      samples::check(cuEventCreate(&start_event, CU_EVENT_BLOCKING_SYNC), "cuEventCreate");
      samples::check(cuEventCreate(&stop_event, CU_EVENT_BLOCKING_SYNC), "cuEventCreate");
      samples::check(calls.event_record(start_event, streams[0]), "cuEventRecord");
    }
    Durations durations(o, index);
    for (size_t i = 0;; ++i) {
      if (g_stop.load(std::memory_order_relaxed)) break;
      if (o.count) {
        if (shared.launches.fetch_add(1) >= o.count) {
          shared.launches--;
          break;
        }
      } else if (!until_signal && std::chrono::steady_clock::now() >= deadline) {
        break;
      }
      const size_t si = i % streams.size();
      uint64_t ns = durations.next_ns();
      void* params[] = {&ns};
      CUresult r = calls.launch(spin, 1, 1, 1, 1, 1, 1, 0, streams[si], params, nullptr);
      if (r != CUDA_SUCCESS) {
        if (o.count) shared.launches--;
        record_error(shared, r, "cuLaunchKernel");
        break;
      }
      if (!o.count) shared.launches++;
      shared.kernel_ns_total += ns;
      if (o.churn_streams > 0 && ++on_stream[si] == o.churn_streams) {
        on_stream[si] = 0;
        samples::check(cuStreamDestroy(streams[si]), "cuStreamDestroy");
        samples::check(cuStreamCreate(&streams[si], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      }
      const bool step_end = o.sync_every == 0 || (i + 1) % static_cast<size_t>(o.sync_every) == 0;
      if (o.sync_every > 0 && step_end) {
        const CUresult w =
            o.per_thread_stream ? calls.stream_sync(streams[si]) : cuCtxSynchronize();
        if (w != CUDA_SUCCESS) {
          record_error(shared, w, o.per_thread_stream ? "cuStreamSynchronize" : "cuCtxSynchronize");
          break;
        }
      }
      if (o.copy_every > 0 && (i + 1) % static_cast<size_t>(o.copy_every) == 0) {
        std::uint32_t back = 0;
        if (CUresult w = calls.memcpy_dtoh(&back, copy_src, sizeof back); w != CUDA_SUCCESS) {
          record_error(shared, w, "cuMemcpyDtoH");
          break;
        }
      }
      if (o.poll_every > 0 && (i + 1) % static_cast<size_t>(o.poll_every) == 0) {
        if (CUresult w = poll_until_idle(calls, streams[si], o.poll_event, o.poll_sleep_us);
            w != CUDA_SUCCESS) {
          record_error(shared, w, o.poll_event ? "cuEventQuery" : "cuStreamQuery");
          break;
        }
      }
      if (o.host_gap_us > 0 && step_end) spin_cpu(o.host_gap_us);
      if (o.inflight > 0) {
        CUevent e;
        samples::check(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC),
                       "cuEventCreate");
        samples::check(calls.event_record(e, streams[si]), "cuEventRecord");
        pending[si].push_back(e);
        if (pending[si].size() >= static_cast<size_t>(o.inflight)) {
          if (CUresult w = cuEventSynchronize(pending[si].front()); w != CUDA_SUCCESS) {
            record_error(shared, w, "cuEventSynchronize");
          }
          cuEventDestroy(pending[si].front());
          pending[si].pop_front();
        }
      }
    }
    if (timed && index == 0)
      samples::check(calls.event_record(stop_event, streams[0]), "cuEventRecord");
    for (size_t si = 0; si < streams.size(); ++si) {
      if (CUresult r = calls.stream_sync(streams[si]); r != CUDA_SUCCESS) {
        record_error(shared, r, "cuStreamSynchronize");
      }
      for (CUevent e : pending[si]) cuEventDestroy(e);
      if (streams[si]) cuStreamDestroy(streams[si]);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(o.threads);
  for (int t = 0; t < o.threads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const uint64_t launches = shared.launches.load();
  nlohmann::json out{{"pid", getpid()},
                     {"launches", launches},
                     {"seconds", elapsed},
                     {"kernels_per_s", elapsed > 0 ? static_cast<double>(launches) / elapsed : 0.0},
                     {"kernel_ns", launches ? shared.kernel_ns_total.load() / launches : 0},
                     {"kernel_ns_total", shared.kernel_ns_total.load()},
                     {"streams", o.streams},
                     {"threads", o.threads},
                     {"per_thread_stream", o.per_thread_stream},
                     {"sync_every", o.sync_every},
                     {"alloc_bytes", o.alloc_mib << 20},
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
  if (buffer) cuMemFree(buffer);
  if (o.explicit_context) {
    cuCtxDestroy(ctx);
  } else {
    cuDevicePrimaryCtxRelease(dev);
  }
  return shared.errors.load() ? 3 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "spin_worker: %s\n", e.what());
  return 2;
}
