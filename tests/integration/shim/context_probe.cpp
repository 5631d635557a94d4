// context_probe: Driver-API workloads for the exact-memory cases (ctest
// shim.memory_exact_*). Links only libcuda; prints one JSON line.
//
//   context_probe threads N HOLD_MS        N threads each cuCtxCreate_v2 at once
//   context_probe tiny MAX                 cuMemAlloc_v2(1) until refused (at most MAX)
//   context_probe private-primary STEP     the primary context through the runtime's
//                                          private path (fakegpu's stand-in), then
//                                          STEP-byte allocations until refused
//   context_probe mixed THREADS SECONDS SEED   threads that create contexts, allocate
//                                          (plain, pitch, managed, async, VMM, arrays)
//                                          and free at random (the process race)
//   context_probe busy CONTEXTS            a thread keeps the GPU busy (1 ms kernels,
//                                          synchronised every 64, stream-ordered
//                                          allocations the syncs give back) while
//                                          another creates and destroys CONTEXTS
//                                          contexts, timing each creation
//   context_probe trim-race CONTEXTS       a thread allocates 64 MiB stream-ordered, frees
//                                          it and synchronises (the pool gives it back)
//                                          while another makes CONTEXTS contexts; then
//                                          16 MiB allocations until refused
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "samples/spin_kernel_ptx.hpp"

// CUDA 13's cuda.h no longer declares the CUDA 3.2 ABI of cuCtxCreate, which
// the driver still exports and older programs call.
extern "C" CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);

namespace {

void fail(const char* what, CUresult r) {
  std::printf("{\"error\":\"%s\",\"code\":%d}\n", what, static_cast<int>(r));
  std::exit(1);
}

CUdevice init() {
  CUdevice dev = 0;
  if (CUresult r = cuInit(0); r != CUDA_SUCCESS) fail("cuInit", r);
  if (CUresult r = cuDeviceGet(&dev, 0); r != CUDA_SUCCESS) fail("cuDeviceGet", r);
  return dev;
}

void sleep_ms(long ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

int threads_mode(int n, long hold_ms) {
  const CUdevice dev = init();
  std::atomic<int> created{0}, refused{0}, other{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      CUcontext ctx = nullptr;
      const CUresult r = cuCtxCreate_v2(&ctx, 0, dev);
      if (r == CUDA_SUCCESS) {
        ++created;
        sleep_ms(hold_ms);
        cuCtxDestroy_v2(ctx);
      } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        ++refused;
      } else {
        ++other;
      }
    });
  }
  go.store(true);
  for (auto& t : threads) t.join();
  std::printf("{\"created\":%d,\"refused\":%d,\"other\":%d}\n", created.load(), refused.load(),
              other.load());
  return 0;
}

int tiny_mode(long max) {
  const CUdevice dev = init();
  CUcontext ctx = nullptr;
  if (CUresult r = cuDevicePrimaryCtxRetain(&ctx, dev); r != CUDA_SUCCESS) fail("retain", r);
  if (CUresult r = cuCtxSetCurrent(ctx); r != CUDA_SUCCESS) fail("cuCtxSetCurrent", r);
  long count = 0;
  CUresult last = CUDA_SUCCESS;
  std::vector<CUdeviceptr> ptrs;
  ptrs.reserve(static_cast<std::size_t>(max));
  while (count < max) {
    CUdeviceptr p = 0;
    if ((last = cuMemAlloc_v2(&p, 1)) != CUDA_SUCCESS) break;
    ptrs.push_back(p);
    ++count;
  }
  std::printf("{\"allocations\":%ld,\"last\":%d}\n", count, static_cast<int>(last));
  std::fflush(stdout);
  sleep_ms(200);
  return 0;
}

int private_primary_mode(std::size_t step) {
  const CUdevice dev = init();
  using Retain = CUresult (*)(CUcontext*, CUdevice);
  auto retain = reinterpret_cast<Retain>(dlsym(RTLD_DEFAULT, "fakegpuPrivatePrimaryCtxRetain"));
  if (!retain) {
    std::printf("{\"error\":\"no private retain (not fakegpu)\"}\n");
    return 77;
  }
  CUcontext ctx = nullptr;
  if (CUresult r = retain(&ctx, dev); r != CUDA_SUCCESS) fail("private retain", r);
  if (CUresult r = cuCtxSetCurrent(ctx); r != CUDA_SUCCESS) fail("cuCtxSetCurrent", r);
  std::size_t got = 0;
  CUresult last = CUDA_SUCCESS;
  for (;;) {
    CUdeviceptr p = 0;
    if ((last = cuMemAlloc_v2(&p, step)) != CUDA_SUCCESS) break;
    got += step;
  }
  size_t free_b = 0, total_b = 0;
  cuMemGetInfo_v2(&free_b, &total_b);
  std::printf("{\"bytes\":%zu,\"last\":%d,\"total\":%zu,\"free\":%zu}\n", got,
              static_cast<int>(last), total_b, free_b);
  std::fflush(stdout);
  sleep_ms(300);
  return 0;
}

// One live allocation of the mixed race, of any kind, and how to free it.
struct Held {
  enum Kind { kPlain, kPitch, kManaged, kAsync, kVmm, kArray } kind;
  CUdeviceptr ptr = 0;
  CUmemGenericAllocationHandle handle = 0;
  CUarray array = nullptr;
  std::size_t size = 0;
};

bool allocate(Held::Kind kind, std::size_t bytes, CUdevice dev, Held& out) {
  out = Held{kind};
  switch (kind) {
    case Held::kPlain:
      return cuMemAlloc_v2(&out.ptr, bytes) == CUDA_SUCCESS;
    case Held::kPitch: {
      std::size_t pitch = 0;
      return cuMemAllocPitch_v2(&out.ptr, &pitch, 4096, bytes / 4096, 4) == CUDA_SUCCESS;
    }
    case Held::kManaged:
      return cuMemAllocManaged(&out.ptr, bytes, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS;
    case Held::kAsync:
      return cuMemAllocAsync(&out.ptr, bytes, nullptr) == CUDA_SUCCESS;
    case Held::kVmm: {
      CUmemAllocationProp prop{};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = dev;
      std::size_t gran = 0;
      if (cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
          CUDA_SUCCESS)
        return false;
      out.size = (bytes + gran - 1) / gran * gran;
      if (cuMemCreate(&out.handle, out.size, &prop, 0) != CUDA_SUCCESS) return false;
      if (cuMemAddressReserve(&out.ptr, out.size, 0, 0, 0) != CUDA_SUCCESS ||
          cuMemMap(out.ptr, out.size, 0, out.handle, 0) != CUDA_SUCCESS) {
        if (out.ptr) cuMemAddressFree(out.ptr, out.size);
        cuMemRelease(out.handle);
        return false;
      }
      return true;
    }
    case Held::kArray: {
      CUDA_ARRAY_DESCRIPTOR d{};
      d.Width = 1024;
      d.Height = bytes / 4096;
      d.Format = CU_AD_FORMAT_FLOAT;
      d.NumChannels = 1;
      return cuArrayCreate_v2(&out.array, &d) == CUDA_SUCCESS;
    }
  }
  return false;
}

void free_held(const Held& h) {
  switch (h.kind) {
    case Held::kAsync:
      cuMemFreeAsync(h.ptr, nullptr);
      break;
    case Held::kVmm:
      cuMemUnmap(h.ptr, h.size);
      cuMemRelease(h.handle);
      cuMemAddressFree(h.ptr, h.size);
      break;
    case Held::kArray:
      cuArrayDestroy(h.array);
      break;
    default:
      cuMemFree_v2(h.ptr);
  }
}

int mixed_mode(int n, double seconds, unsigned seed) {
  const CUdevice dev = init();
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<long> contexts{0}, context_refusals{0}, allocs{0}, alloc_refusals{0};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937 rng(seed * 131 + static_cast<unsigned>(i));
      CUcontext ctx = nullptr;
      std::vector<Held> held;
      auto drop_all = [&] {
        for (const Held& h : held) free_held(h);
        held.clear();
        cuCtxSynchronize();
      };
      while (std::chrono::steady_clock::now() < end) {
        if (!ctx) {
          const CUresult r = cuCtxCreate_v2(&ctx, 0, dev);
          if (r != CUDA_SUCCESS) {
            ctx = nullptr;
            ++context_refusals;
            sleep_ms(5);
            continue;
          }
          ++contexts;
        }
        cuCtxSetCurrent(ctx);
        const int op = static_cast<int>(rng() % 10);
        if (op < 6) {
          const auto kind = static_cast<Held::Kind>(rng() % 6);
          const std::size_t bytes = (1 + rng() % 64) << 20;
          Held h;
          if (allocate(kind, bytes, dev, h)) {
            held.push_back(h);
            ++allocs;
          } else {
            ++alloc_refusals;
          }
        } else if (op < 9 && !held.empty()) {
          free_held(held.back());
          held.pop_back();
        } else {
          drop_all();
          cuCtxDestroy_v2(ctx);
          ctx = nullptr;
        }
      }
      if (ctx) {
        cuCtxSetCurrent(ctx);
        drop_all();
        cuCtxDestroy_v2(ctx);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::printf(
      "{\"contexts\":%ld,\"context_refusals\":%ld,\"allocations\":%ld,\"alloc_refusals\":%ld}\n",
      contexts.load(), context_refusals.load(), allocs.load(), alloc_refusals.load());
  return 0;
}

// The sample kernel that spins for its argument's nanoseconds, in the current context.
CUfunction load_spin() {
  CUmodule module = nullptr;
  if (CUresult r = cuModuleLoadData(&module, samples::kSpinKernelPtx); r != CUDA_SUCCESS)
    fail("cuModuleLoadData", r);
  CUfunction spin = nullptr;
  if (CUresult r = cuModuleGetFunction(&spin, module, "spin"); r != CUDA_SUCCESS)
    fail("cuModuleGetFunction", r);
  return spin;
}

CUresult launch_spin(CUfunction spin, std::uint64_t ns, CUstream stream) {
  void* params[] = {&ns};
  return cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
}

int busy_mode(int contexts) {
  const CUdevice dev = init();
  CUcontext ctx = nullptr;
  if (CUresult r = cuCtxCreate_v2(&ctx, 0, dev); r != CUDA_SUCCESS) fail("cuCtxCreate", r);
  const CUfunction spin = load_spin();
  std::atomic<bool> stop{false};
  std::atomic<long> launches{0};
  std::thread launcher([&] {
    cuCtxSetCurrent(ctx);
    CUstream stream = nullptr;
    cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    while (!stop.load()) {
      for (int k = 0; k < 64 && !stop.load(); ++k) {
        if (launch_spin(spin, 1'000'000, stream) == CUDA_SUCCESS) ++launches;
      }
      CUdeviceptr p = 0;
      if (cuMemAllocAsync(&p, 8 << 20, stream) == CUDA_SUCCESS) cuMemFreeAsync(p, stream);
      cuStreamSynchronize(stream);  // the pool gives the 8 MiB back here
    }
    cuStreamDestroy(stream);
  });
  while (launches.load() < 8) sleep_ms(1);
  std::vector<double> ms;
  for (int i = 0; i < contexts; ++i) {
    CUcontext c = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    const CUresult r = cuCtxCreate_v2(&c, 0, dev);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (r != CUDA_SUCCESS) fail("cuCtxCreate (busy)", r);
    cuCtxDestroy_v2(c);
    sleep_ms(20);
  }
  stop = true;
  launcher.join();
  std::sort(ms.begin(), ms.end());
  std::printf("{\"contexts\":%d,\"median_ms\":%.2f,\"max_ms\":%.2f,\"launches\":%ld}\n", contexts,
              ms[ms.size() / 2], ms.back(), launches.load());
  return 0;
}

int trim_race_mode(int contexts) {
  const CUdevice dev = init();
  CUcontext ctx = nullptr;
  if (CUresult r = cuCtxCreate_v2(&ctx, 0, dev); r != CUDA_SUCCESS) fail("cuCtxCreate", r);
  const CUfunction spin = load_spin();
  std::atomic<bool> stop{false};
  std::atomic<long> trims{0};
  std::thread churn([&] {
    cuCtxSetCurrent(ctx);
    CUstream stream = nullptr;
    cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    while (!stop.load()) {
      CUdeviceptr p = 0;
      if (cuMemAllocAsync(&p, 64 << 20, stream) != CUDA_SUCCESS) continue;
      cuMemFreeAsync(p, stream);
      // The synchronisation waits for the kernel, then gives the 64 MiB
      // back: at a moment no memory call marks.
      launch_spin(spin, 200'000, stream);
      if (cuStreamSynchronize(stream) == CUDA_SUCCESS) ++trims;
    }
    cuStreamDestroy(stream);
  });
  std::vector<CUcontext> made;
  for (int i = 0; i < contexts; ++i) {
    CUcontext c = nullptr;
    if (cuCtxCreate_v2(&c, 0, dev) == CUDA_SUCCESS) made.push_back(c);
    std::this_thread::sleep_for(std::chrono::microseconds(500 + 130 * (i % 7)));
  }
  stop = true;
  churn.join();
  cuCtxSetCurrent(ctx);
  std::uint64_t bytes = 0;
  std::vector<CUdeviceptr> held;
  for (CUdeviceptr p = 0; cuMemAlloc_v2(&p, 16 << 20) == CUDA_SUCCESS;) {
    held.push_back(p);
    bytes += 16 << 20;
  }
  std::printf("{\"contexts\":%zu,\"trims\":%ld,\"bytes\":%llu}\n", made.size(), trims.load(),
              static_cast<unsigned long long>(bytes));
  std::fflush(stdout);
  return 0;
}

// Allocates BYTES, then exits without freeing through an exit path that takes
// SECONDS: a handler registered before cuInit runs after every handler
// registered by cuInit, and before the driver's own teardown (as an
// application's static destructors and interpreter shutdown do). The memory
// is the device's until the process is gone.
double g_exit_seconds = 0;
int slow_exit_mode(std::uint64_t bytes, double seconds) {
  g_exit_seconds = seconds;
  std::atexit([] { std::this_thread::sleep_for(std::chrono::duration<double>(g_exit_seconds)); });
  const CUdevice dev = init();
  CUcontext ctx = nullptr;
  if (CUresult r = cuCtxCreate_v2(&ctx, 0, dev); r != CUDA_SUCCESS) fail("cuCtxCreate", r);
  CUdeviceptr ptr = 0;
  const CUresult r = cuMemAlloc_v2(&ptr, bytes);
  std::printf("{\"last\":%d}\n", static_cast<int>(r));
  std::fflush(stdout);
  std::exit(r == CUDA_SUCCESS ? 0 : 1);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "threads" && argc == 4) return threads_mode(std::atoi(argv[2]), std::atol(argv[3]));
  if (mode == "tiny" && argc == 3) return tiny_mode(std::atol(argv[2]));
  if (mode == "private-primary" && argc == 3)
    return private_primary_mode(std::strtoull(argv[2], nullptr, 10));
  if (mode == "slow-exit" && argc == 4)
    return slow_exit_mode(std::strtoull(argv[2], nullptr, 10), std::atof(argv[3]));
  if (mode == "busy" && argc == 3) return busy_mode(std::max(1, std::atoi(argv[2])));
  if (mode == "trim-race" && argc == 3) return trim_race_mode(std::atoi(argv[2]));
  if (mode == "mixed" && argc == 5)
    return mixed_mode(std::atoi(argv[2]), std::atof(argv[3]),
                      static_cast<unsigned>(std::atoi(argv[4])));
  std::fprintf(stderr,
               "usage: context_probe threads N HOLD_MS | tiny MAX | private-primary STEP |"
               " mixed THREADS SECONDS SEED | busy CONTEXTS | trim-race CONTEXTS |"
               " slow-exit BYTES SECONDS\n");
  return 2;
}
