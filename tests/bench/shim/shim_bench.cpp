// Per-call cost of the driver paths the shim sits on, for a side-by-side run
// with and without libcushare.so preloaded (run_shim_bench.py computes the
// added time). Linked with -lcuda (fakegpu's at build time, whatever
// LD_LIBRARY_PATH picks at run time), so calls bind to the shim's exports
// exactly as a driver-API program's do.
#include <benchmark/benchmark.h>
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

CUcontext g_ctx = nullptr;

void setup() {
  if (g_ctx) return;
  CUdevice dev;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&g_ctx, dev) != CUDA_SUCCESS ||
      cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "shim_bench: CUDA setup failed\n");
    std::exit(1);
  }
}

void BM_AllocFreePair(benchmark::State& state) {
  setup();
  cuCtxSetCurrent(g_ctx);
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, size) != CUDA_SUCCESS) state.SkipWithError("cuMemAlloc_v2 failed");
    cuMemFree(p);
  }
}
BENCHMARK(BM_AllocFreePair)->Arg(1 << 20);

// Stream-ordered allocation from the device's default pool: the pool keeps
// the memory, so after the first round the driver only hands it out again.
void BM_AllocAsyncFreePair(benchmark::State& state) {
  setup();
  cuCtxSetCurrent(g_ctx);
  CUstream s = nullptr;
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (cuMemAllocAsync(&p, size, s) != CUDA_SUCCESS) state.SkipWithError("cuMemAllocAsync failed");
    cuMemFreeAsync(p, s);
  }
  cuStreamSynchronize(s);
  cuStreamDestroy(s);
}
BENCHMARK(BM_AllocAsyncFreePair)->Arg(1 << 20);

// From the last of `range(0)` pools: the shim finds that pool's record among
// as many others.
void BM_AllocFromPoolFreePair(benchmark::State& state) {
  setup();
  cuCtxSetCurrent(g_ctx);
  CUstream s = nullptr;
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  std::vector<CUmemoryPool> pools(static_cast<size_t>(state.range(0)));
  for (auto& pool : pools) {
    if (cuMemPoolCreate(&pool, &props) != CUDA_SUCCESS) state.SkipWithError("cuMemPoolCreate");
  }
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (cuMemAllocFromPoolAsync(&p, 1 << 20, pools.back(), s) != CUDA_SUCCESS)
      state.SkipWithError("cuMemAllocFromPoolAsync failed");
    cuMemFreeAsync(p, s);
  }
  cuStreamSynchronize(s);
  for (auto pool : pools) cuMemPoolDestroy(pool);
  cuStreamDestroy(s);
}
BENCHMARK(BM_AllocFromPoolFreePair)->Arg(1)->Arg(200);

// CUDA 13's cuda.h no longer declares the CUDA 3.2 ABI, which drivers export.
extern "C" CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);

// A context made and destroyed: with the shim, the reservation of its
// overhead, the NVML samples around the creation and the settle.
void BM_ContextCreateDestroy(benchmark::State& state) {
  setup();
  CUdevice dev = 0;
  cuDeviceGet(&dev, 0);
  for (auto _ : state) {
    CUcontext ctx = nullptr;
    if (cuCtxCreate_v2(&ctx, 0, dev) != CUDA_SUCCESS) {
      state.SkipWithError("cuCtxCreate_v2 failed");
      break;
    }
    cuCtxDestroy(ctx);
  }
  cuCtxSetCurrent(g_ctx);
}
BENCHMARK(BM_ContextCreateDestroy);

void BM_PassThroughCtxGetDevice(benchmark::State& state) {
  setup();
  cuCtxSetCurrent(g_ctx);
  CUdevice dev;
  for (auto _ : state) benchmark::DoNotOptimize(cuCtxGetDevice(&dev));
}
BENCHMARK(BM_PassThroughCtxGetDevice);

void BM_MemGetInfo(benchmark::State& state) {
  setup();
  cuCtxSetCurrent(g_ctx);
  size_t free = 0, total = 0;
  for (auto _ : state) benchmark::DoNotOptimize(cuMemGetInfo(&free, &total));
}
BENCHMARK(BM_MemGetInfo);

}  // namespace

BENCHMARK_MAIN();
