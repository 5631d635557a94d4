// The simulated driver and NVML in one process: cuGetProcAddress resolution,
// timing, memory paths, graphs, host callbacks, NVML agreement, XID events,
// and recovery from a client that died holding the state lock.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nvml_subset.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/integration/fakegpu/cu_expect.hpp"

namespace {

using fakegpu_test::error_name;

constexpr const char* kPtx = R"(
.version 8.0
.target sm_80
.address_size 64
.visible .entry spin(.param .u64 ns)
{
  ret;
}
.visible .entry noop()
{
  ret;
}
)";

class Api : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleLoadData(&module_, kPtx), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&spin_, module_, "spin"), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&noop_, module_, "noop"), CUDA_SUCCESS);
  }
  void SetUp() override { ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS); }

  static CUresult launch_spin(uint64_t ns, CUstream stream = nullptr) {
    void* params[] = {&ns};
    return cuLaunchKernel(spin_, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
  }
  // A new stream with a kernel of `ns` queued on it and a new event
  // recorded behind that.
  static void record_behind_kernel(uint64_t ns, CUstream* s, CUevent* e) {
    ASSERT_EQ(cuStreamCreate(s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(launch_spin(ns, *s), CUDA_SUCCESS);
    ASSERT_EQ(cuEventCreate(e, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(*e, *s), CUDA_SUCCESS);
  }
  static float elapsed_ms(CUevent a, CUevent b) {
    float ms = -1;
    EXPECT_EQ(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
    return ms;
  }

  static inline CUcontext ctx_ = nullptr;
  static inline CUmodule module_ = nullptr;
  static inline CUfunction spin_ = nullptr, noop_ = nullptr;
};

// ---- cuGetProcAddress ----

void* exported(const char* symbol) {
  static void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib ? dlsym(lib, symbol) : nullptr;
}

struct Row {
  const char* base;
  int version;
  int per_thread;
  const char* symbol;
};

const Row kRows[] = {
#define FAKEGPU_PROC(base, version, pt, symbol) {base, version, pt, #symbol},
#include "tests/fakegpu/cuda/proc_table.inc"
#undef FAKEGPU_PROC
};

TEST_F(Api, ProcAddressResolvesEveryTypedefToItsVersionedExport) {
  for (const Row& row : kRows) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    const cuuint64_t flags = row.per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                            : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    ASSERT_EQ(cuGetProcAddress_v2(row.base, &fn, row.version, flags, &status), CUDA_SUCCESS)
        << row.symbol;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << row.symbol;
    ASSERT_NE(exported(row.symbol), nullptr) << row.symbol << " is not exported";
    EXPECT_EQ(fn, exported(row.symbol))
        << row.base << " @" << row.version << " should be " << row.symbol;
  }
}

struct Case {
  const char* base;
  int version;
  cuuint64_t flags;
  const char* expected;
};

TEST_F(Api, ProcAddressPicksTheAbiForTheRequestedVersionAndFlags) {
  const Case cases[] = {
      {"cuMemAlloc", 2000, 0, "cuMemAlloc"},
      {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
      {"cuMemAlloc", 13000, 0, "cuMemAlloc_v2"},
      {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
      {"cuCtxCreate", 12000, 0, "cuCtxCreate_v3"},
      {"cuCtxCreate", 12050, 0, "cuCtxCreate_v4"},
      {"cuCtxSynchronize", 12080, 0, "cuCtxSynchronize"},
      {"cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"},
      {"cuLaunchKernel", 12000, 0, "cuLaunchKernel"},
      {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel"},
      {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuLaunchKernel_ptsz"},
      {"cuLaunchKernel", 4000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel"},
      {"cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuMemcpyHtoD_v2_ptds"},
      {"cuMemcpyHtoD", 3020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2"},
      {"cuStreamGetCaptureInfo", 12030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuStreamGetCaptureInfo_v3_ptsz"},
      {"cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuMemAllocAsync_ptsz"},
      {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
      {"cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2"},
      {"cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2"},
  };
  for (const Case& c : cases) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    ASSERT_EQ(cuGetProcAddress_v2(c.base, &fn, c.version, c.flags, &status), CUDA_SUCCESS)
        << c.base;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
    EXPECT_EQ(fn, exported(c.expected))
        << c.base << " @" << c.version << " flags " << c.flags << " -> " << c.expected;
  }
  void* fn = nullptr;
  // cuda.h maps cuGetProcAddress to _v2; the 4-argument export is still there.
  auto v1 = reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t)>(
      exported("cuGetProcAddress"));
  ASSERT_NE(v1, nullptr);
  ASSERT_EQ(v1("cuMemGetInfo", &fn, 12000, 0), CUDA_SUCCESS);
  EXPECT_EQ(fn, exported("cuMemGetInfo_v2"));
}

TEST_F(Api, ProcAddressReportsUnknownAndTooOldAndRejectsTooNew) {
  void* fn = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult status{};
  EXPECT_EQ(cuGetProcAddress_v2("cuDoesNotExist", &fn, 12000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  fn = reinterpret_cast<void*>(1);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 11000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 13010, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 4, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2(nullptr, &fn, 12000, 0, &status), CUDA_ERROR_INVALID_VALUE);
  // A function fakegpu does not model is still found and answers NOT_SUPPORTED.
  EXPECT_EQ(cuGetProcAddress_v2("cuGraphicsMapResources", &fn, 12000, 0, &status), CUDA_SUCCESS);
  ASSERT_NE(fn, nullptr);
  EXPECT_EQ(reinterpret_cast<CUresult (*)(unsigned, CUgraphicsResource*, CUstream)>(fn)(0, nullptr,
                                                                                        nullptr),
            CUDA_ERROR_NOT_SUPPORTED);
}

// ---- timing ----

TEST_F(Api, EventsMeasureSimulatedKernelTime) {
  CUevent start, stop;
  ASSERT_EQ(cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&stop, 0), CUDA_SUCCESS);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  // Each measurement starts behind a queued 5 ms kernel: on an idle stream the
  // start event would also time this thread's way to the first launch (a
  // preemption on a loaded host), not the kernels alone.
  ASSERT_EQ(launch_spin(5'000'000, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(start, s), CUDA_SUCCESS);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(launch_spin(5'000'000, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(stop, s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(stop), CUDA_ERROR_NOT_READY);
  float ms = 0;
  EXPECT_EQ(cuEventElapsedTime(&ms, start, stop), CUDA_ERROR_NOT_READY);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(cuEventSynchronize(stop), CUDA_SUCCESS);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(15));
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  EXPECT_NEAR(elapsed_ms(start, stop), 20.0, 1.0);

  // Kernels without a duration parameter take FAKEGPU_KERNEL_NS (default 10 us).
  // Queued behind a 5 ms kernel, so that they run back to back however slowly
  // this host submits them (under a sanitizer a launch takes longer than 10 us).
  ASSERT_EQ(launch_spin(5'000'000, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(start, s), CUDA_SUCCESS);
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(cuLaunchKernel(noop_, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(stop, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_NEAR(elapsed_ms(start, stop), 1.0, 0.05);

  // The `extra` buffer form carries the duration too.
  uint64_t ns = 3'000'000;
  size_t size = sizeof ns;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &ns, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  ASSERT_EQ(launch_spin(5'000'000, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(start, s), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, s, nullptr, extra), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(stop, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_NEAR(elapsed_ms(start, stop), 3.0, 0.15);
  cuStreamDestroy(s);
  cuEventDestroy(start);
  cuEventDestroy(stop);
}

// A context's streams run side by side: an idle stream's record completes at
// once while another stream's 1 s kernel runs, and a stream that waits on that
// kernel's event (the same context) waits for it, while the other does not.
TEST_F(Api, StreamsOfOneContextRunSideBySideAndWaitOnEachOther) {
  CUstream busy = nullptr, idle = nullptr, waiting = nullptr;
  CUevent behind = nullptr, on_idle = nullptr, after_wait = nullptr;
  record_behind_kernel(1'000'000'000, &busy, &behind);
  ASSERT_EQ(cuStreamCreate(&idle, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&waiting, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&on_idle, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&after_wait, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(on_idle, idle), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(waiting, behind, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(after_wait, waiting), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(on_idle), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(idle), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(busy), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(after_wait), CUDA_ERROR_NOT_READY);
  // The event recorded again on the idle stream: the queued wait still holds
  // the record it was made for.
  ASSERT_EQ(cuEventRecord(behind, idle), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(behind), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(after_wait), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamSynchronize(waiting), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(busy), CUDA_SUCCESS);
  for (CUevent e : {behind, on_idle, after_wait}) ASSERT_EQ(cuEventDestroy(e), CUDA_SUCCESS);
  for (CUstream s : {busy, idle, waiting}) ASSERT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(Api, LaunchValidatesItsArguments) {
  uint64_t ns = 1;
  void* params[] = {&ns};
  EXPECT_EQ(cuLaunchKernel(spin_, 0, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(spin_, 1, 1, 1, 1025, 1, 1, 0, nullptr, params, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  CUfunction missing;
  EXPECT_EQ(cuModuleGetFunction(&missing, module_, "absent"), CUDA_ERROR_NOT_FOUND);
}

TEST_F(Api, GraphsCaptureAndReplayKernels) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureStatus status;
  ASSERT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(launch_spin(1'000'000, s), CUDA_SUCCESS);
  // (A synchronisation of it here would be refused and end the capture
  // invalidated: AnInvalidatedCaptureRefusesMoreWorkAndSaysSo.)
  CUgraph graph;
  ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  size_t nodes = 0;
  ASSERT_EQ(cuGraphGetNodes(graph, nullptr, &nodes), CUDA_SUCCESS);
  EXPECT_EQ(nodes, 3u);
  CUgraphExec exec;
  ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  CUevent a, b;
  cuEventCreate(&a, 0);
  cuEventCreate(&b, 0);
  // Behind a queued 5 ms kernel, so that `a` does not time the way to the
  // first launch (see EventsMeasureSimulatedKernelTime).
  ASSERT_EQ(launch_spin(5'000'000, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(a, s), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(b, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_NEAR(elapsed_ms(a, b), 6.0, 0.3);
  cuGraphExecDestroy(exec);
  cuGraphDestroy(graph);
  cuStreamDestroy(s);
}

TEST_F(Api, StreamsJoinACaptureThroughItsEventsAndMustBeJoinedBack) {
  CUstream origin, forked, other;
  ASSERT_EQ(cuStreamCreate(&origin, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&forked, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent fork, join;
  for (CUevent* e : {&fork, &join}) ASSERT_EQ(cuEventCreate(e, 0), CUDA_SUCCESS);
  auto status_of = [](CUstream s) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    EXPECT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
    return status;
  };
  auto node_count = [](CUgraph g) {
    size_t n = 0;
    EXPECT_EQ(cuGraphGetNodes(g, nullptr, &n), CUDA_SUCCESS);
    return n;
  };
  for (bool join_back : {false, true}) {
    SCOPED_TRACE(join_back ? "joined back" : "not joined back");
    ASSERT_EQ(cuStreamBeginCapture(origin, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    ASSERT_EQ(launch_spin(1'000, origin), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(fork, origin), CUDA_SUCCESS);
    EXPECT_EQ(status_of(forked), CU_STREAM_CAPTURE_STATUS_NONE);
    ASSERT_EQ(cuStreamWaitEvent(forked, fork, 0), CUDA_SUCCESS);  // the fork: it joins
    EXPECT_EQ(status_of(forked), CU_STREAM_CAPTURE_STATUS_ACTIVE);
    ASSERT_EQ(launch_spin(1'000, forked), CUDA_SUCCESS);
    ASSERT_EQ(launch_spin(1'000, forked), CUDA_SUCCESS);
    // Only the origin ends a capture.
    CUgraph wrong = nullptr;
    EXPECT_EQ(cuStreamEndCapture(forked, &wrong), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    // Two independent captures cannot merge.
    ASSERT_EQ(cuStreamBeginCapture(other, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamWaitEvent(other, fork, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
    CUgraph other_graph = nullptr;
    ASSERT_EQ(cuStreamEndCapture(other, &other_graph), CUDA_SUCCESS);
    cuGraphDestroy(other_graph);
    if (join_back) {
      ASSERT_EQ(cuEventRecord(join, forked), CUDA_SUCCESS);
      ASSERT_EQ(cuStreamWaitEvent(origin, join, 0), CUDA_SUCCESS);
    }
    CUgraph graph = nullptr;
    if (join_back) {
      ASSERT_EQ(cuStreamEndCapture(origin, &graph), CUDA_SUCCESS);
      EXPECT_EQ(node_count(graph), 3u);  // the forked stream's kernels are the origin's graph's
      cuGraphDestroy(graph);
    } else {
      EXPECT_EQ(cuStreamEndCapture(origin, &graph), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
      EXPECT_EQ(graph, nullptr);
    }
    EXPECT_EQ(status_of(origin), CU_STREAM_CAPTURE_STATUS_NONE);
    EXPECT_EQ(status_of(forked), CU_STREAM_CAPTURE_STATUS_NONE);  // its end ends the fork's too
  }
  for (CUevent e : {fork, join}) cuEventDestroy(e);
  for (CUstream s : {origin, forked, other}) cuStreamDestroy(s);
}

// The NULL stream of a _ptsz call, and CU_STREAM_PER_THREAD anywhere, is the
// calling thread's own default stream: it can be captured (the legacy one
// cannot), and while it or any blocking stream captures, the legacy stream
// is unusable (its work would wait for the capture).
TEST_F(Api, PerThreadDefaultStreamsAreEachThreadsOwnAndCapturable) {
  using GetId = CUresult (*)(CUstream, unsigned long long*);
  using BeginCapture = CUresult (*)(CUstream, CUstreamCaptureMode);
  using EndCapture = CUresult (*)(CUstream, CUgraph*);
  using IsCapturing = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  const auto get_id_ptsz = reinterpret_cast<GetId>(exported("cuStreamGetId_ptsz"));
  const auto begin_ptsz = reinterpret_cast<BeginCapture>(exported("cuStreamBeginCapture_v2_ptsz"));
  const auto end_ptsz = reinterpret_cast<EndCapture>(exported("cuStreamEndCapture_ptsz"));
  const auto capturing_ptsz = reinterpret_cast<IsCapturing>(exported("cuStreamIsCapturing_ptsz"));
  ASSERT_TRUE(get_id_ptsz && begin_ptsz && end_ptsz && capturing_ptsz);

  unsigned long long legacy = 0, mine = 0, mine_ptsz = 0, theirs = 0;
  ASSERT_EQ(cuStreamGetId(nullptr, &legacy), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &mine), CUDA_SUCCESS);
  ASSERT_EQ(get_id_ptsz(nullptr, &mine_ptsz), CUDA_SUCCESS);
  std::thread([&] {
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &theirs), CUDA_SUCCESS);
  }).join();
  EXPECT_EQ(mine, mine_ptsz);
  EXPECT_NE(mine, legacy);
  EXPECT_NE(mine, theirs);

  EXPECT_EQ(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(begin_ptsz(nullptr, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_EQ(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(cuStreamIsCapturing(nullptr, &status), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  unsigned long long id = 0;  // reading a field is no use of the stream
  EXPECT_EQ(cuStreamGetId(nullptr, &id), CUDA_SUCCESS);
  // Another thread's per-thread stream and a non-blocking stream run as usual.
  std::thread([&] {
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    CUstreamCaptureStatus theirs_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    EXPECT_EQ(capturing_ptsz(nullptr, &theirs_status), CUDA_SUCCESS);
    EXPECT_EQ(theirs_status, CU_STREAM_CAPTURE_STATUS_NONE);
    EXPECT_EQ(launch_spin(1'000, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  }).join();
  CUstream nonblocking;
  ASSERT_EQ(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(launch_spin(1'000, nonblocking), CUDA_SUCCESS);
  ASSERT_EQ(launch_spin(1'000, CU_STREAM_PER_THREAD), CUDA_SUCCESS);  // captured
  CUgraph graph = nullptr;
  ASSERT_EQ(end_ptsz(nullptr, &graph), CUDA_SUCCESS);
  size_t nodes = 0;
  ASSERT_EQ(cuGraphGetNodes(graph, nullptr, &nodes), CUDA_SUCCESS);
  EXPECT_EQ(nodes, 1u);
  EXPECT_EQ(launch_spin(1'000), CUDA_SUCCESS);  // the legacy stream is usable again
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  cuGraphDestroy(graph);
  cuStreamDestroy(nonblocking);

  // Work on the legacy stream meanwhile is refused (the driver may also
  // invalidate the capture then, which fakegpu does not model: its end is
  // not judged).
  ASSERT_EQ(begin_ptsz(nullptr, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(launch_spin(1'000), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  graph = nullptr;
  end_ptsz(nullptr, &graph);
  if (graph) cuGraphDestroy(graph);
  EXPECT_EQ(launch_spin(1'000), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(Api, GraphMemoryComesFromTheDeviceGraphPool) {
  size_t free0, total;
  ASSERT_EQ(cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
  auto used_since = [&] {
    size_t f, t;
    EXPECT_EQ(cuMemGetInfo(&f, &t), CUDA_SUCCESS);
    return free0 - f;
  };
  auto attr = [](CUgraphMem_attribute a) {
    cuuint64_t v = 99;
    EXPECT_EQ(cuDeviceGetGraphMemAttribute(0, a, &v), CUDA_SUCCESS);
    return v;
  };
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr p = 0, kept = 0;
  ASSERT_EQ(cuMemAllocAsync(&p, 3 << 20, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(p, 1, 3 << 20, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&kept, 1 << 20, s), CUDA_SUCCESS);  // not freed by the graph
  CUgraph graph;
  ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  CUgraphExec exec;
  ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  EXPECT_EQ(used_since(), 0u);  // nothing until the first launch
  EXPECT_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0u);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 6u << 20);  // 4 MiB + 2 MiB granules
  EXPECT_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 2u << 20);      // the allocation left live
  EXPECT_EQ(used_since(), 6u << 20);
  ASSERT_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
  EXPECT_EQ(used_since(), 2u << 20);  // trimming keeps live graph allocations
  ASSERT_EQ(cuMemFreeAsync(kept, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0u);
  ASSERT_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
  EXPECT_EQ(used_since(), 0u);
  EXPECT_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0u);
  cuGraphExecDestroy(exec);
  cuGraphDestroy(graph);
  cuStreamDestroy(s);
}

TEST_F(Api, HostFunctionsRunInStreamOrder) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  static std::atomic<int> calls{0};
  // Long enough that a descheduled test process (2 loaded cores) still checks
  // before the simulated kernel ends.
  ASSERT_EQ(launch_spin(400'000'000, s), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchHostFunc(
                s, [](void*) { calls++; }, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(calls.load(), 0);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(calls.load(), 1);
  cuStreamDestroy(s);
}

// ---- memory ----

TEST_F(Api, CopiesAndMemsetsHoldRealBytes) {
  CUdeviceptr a, b;
  ASSERT_EQ(cuMemAlloc(&a, 1 << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, 1 << 20), CUDA_SUCCESS);
  std::vector<uint32_t> in(1 << 18), out(1 << 18);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint32_t>(i * 2654435761u);
  ASSERT_EQ(cuMemcpyHtoD(a, in.data(), 1 << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD(b, a, 1 << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(out.data(), b, 1 << 20), CUDA_SUCCESS);
  EXPECT_EQ(in, out);
  ASSERT_EQ(cuMemsetD32(b + 4, 0xdeadbeef, 2), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(out.data(), b, 16), CUDA_SUCCESS);
  EXPECT_EQ(out[0], in[0]);
  EXPECT_EQ(out[1], 0xdeadbeefu);
  EXPECT_EQ(out[2], 0xdeadbeefu);
  EXPECT_EQ(out[3], in[3]);
  EXPECT_EQ(cuMemcpyHtoD(a + (1 << 20) - 4, in.data(), 8),
            CUDA_ERROR_INVALID_VALUE);  // past the end
  CUdeviceptr base;
  size_t size;
  ASSERT_EQ(cuMemGetAddressRange(&base, &size, a + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, a);
  EXPECT_EQ(size, 1u << 20);
  cuMemFree(a);
  cuMemFree(b);
}

TEST_F(Api, EveryAllocationPathChargesTheDevice) {
  size_t free0, total;
  ASSERT_EQ(cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
  auto used_since = [&] {
    size_t f, t;
    EXPECT_EQ(cuMemGetInfo(&f, &t), CUDA_SUCCESS);
    return free0 - f;
  };
  CUdeviceptr p;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch(&p, &pitch, 1000, 100, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(used_since(), 1024u * 100);
  cuMemFree(p);

  ASSERT_EQ(cuMemAllocManaged(&p, 4 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  reinterpret_cast<char*>(p)[123] = 7;  // managed memory is host-accessible
  EXPECT_EQ(used_since(), 4u << 20);
  cuMemFree(p);

  // Pools keep freed memory until a sync point returns what exceeds the release threshold.
  CUmemoryPool pool;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&p, 3 << 20, s), CUDA_SUCCESS);
  cuuint64_t reserved = 0, used = 0;
  ASSERT_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved),
            CUDA_SUCCESS);
  ASSERT_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), CUDA_SUCCESS);
  EXPECT_EQ(reserved, 4u << 20);  // 2 MiB granules
  EXPECT_EQ(used, 3u << 20);
  EXPECT_EQ(used_since(), 4u << 20);
  cuuint64_t threshold = 64 << 20;
  ASSERT_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
            CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(used_since(), 4u << 20);  // kept: below the threshold
  ASSERT_EQ(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
  EXPECT_EQ(used_since(), 0u);
  threshold = 0;
  cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);

  // VMM: charged at cuMemCreate; freed only once released and unmapped.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  CUmemGenericAllocationHandle h;
  EXPECT_EQ(cuMemCreate(&h, granularity + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemCreate(&h, 2 * granularity, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(used_since(), 2 * granularity);
  ASSERT_EQ(cuMemAddressReserve(&p, 2 * granularity, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(p, 2 * granularity, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(cuMemSetAccess(p, 2 * granularity, &access, 1), CUDA_SUCCESS);
  uint32_t word = 42, back = 0;
  ASSERT_EQ(cuMemcpyHtoD(p + granularity, &word, 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(&back, p + granularity, 4), CUDA_SUCCESS);
  EXPECT_EQ(back, 42u);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(used_since(), 2 * granularity);  // still mapped
  ASSERT_EQ(cuMemUnmap(p, 2 * granularity), CUDA_SUCCESS);
  EXPECT_EQ(used_since(), 0u);
  ASSERT_EQ(cuMemAddressFree(p, 2 * granularity), CUDA_SUCCESS);

  // Host locations do not use device memory.
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  ASSERT_EQ(cuMemCreate(&h, granularity, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(used_since(), 0u);
  cuMemRelease(h);

  // Arrays.
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = 1024;
  desc.Height = 1024;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 4;
  CUarray array;
  ASSERT_EQ(cuArray3DCreate(&array, &desc), CUDA_SUCCESS);
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  ASSERT_EQ(cuArrayGetMemoryRequirements(&req, array, 0), CUDA_SUCCESS);
  EXPECT_EQ(req.size, 16u << 20);
  EXPECT_EQ(used_since(), 16u << 20);
  cuArrayDestroy(array);
  EXPECT_EQ(used_since(), 0u);

  // Pinned host memory is not device memory.
  void* host = nullptr;
  ASSERT_EQ(cuMemAllocHost(&host, 1 << 20), CUDA_SUCCESS);
  EXPECT_EQ(used_since(), 0u);
  cuMemFreeHost(host);
  cuStreamDestroy(s);
}

TEST_F(Api, ExplicitContextsCostTheirOverhead) {
  size_t free0, free1, total;
  ASSERT_EQ(cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
  CUcontext extra;
  CUctxCreateParams params{};
  ASSERT_EQ(cuCtxCreate(&extra, &params, 0, 0), CUDA_SUCCESS);
  CUcontext current;
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, extra);
  ASSERT_EQ(cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free0 - free1, 300u << 20);
  ASSERT_EQ(cuCtxDestroy(extra), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free0, free1);
}

// ---- events and contexts across contexts ----

// A context of its own on device 0, current, with the spin kernel loaded.
struct OtherContext {
  CUcontext ctx = nullptr;
  CUmodule module = nullptr;
  CUfunction spin = nullptr;
  CUstream stream = nullptr;

  OtherContext() {
    CUctxCreateParams params{};
    EXPECT_EQ(cuCtxCreate(&ctx, &params, 0, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuModuleLoadData(&module, kPtx), CUDA_SUCCESS);
    EXPECT_EQ(cuModuleGetFunction(&spin, module, "spin"), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  ~OtherContext() { EXPECT_EQ(cuCtxDestroy(ctx), CUDA_SUCCESS); }
  OtherContext(const OtherContext&) = delete;
  OtherContext& operator=(const OtherContext&) = delete;

  CUresult launch_spin(uint64_t ns) const {
    void* params[] = {&ns};
    return cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
  }
  // A new event recorded on its stream.
  CUevent record() const {
    CUevent e = nullptr;
    EXPECT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuEventRecord(e, stream), CUDA_SUCCESS);
    return e;
  }
};

// `e` has not completed yet; it does once waited for (and is destroyed).
void expect_pending_until_waited(CUevent e) {
  EXPECT_EQ(error_name(cuEventQuery(e)), "CUDA_ERROR_NOT_READY");
  EXPECT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy(e), CUDA_SUCCESS);
}

TEST_F(Api, ADestroyedEventsQueuedRecordCompletesNoOtherEvent) {
  // "If hEvent has been recorded but has not yet been completed ..., the
  // function will return immediately and the resources associated with
  // hEvent will be released automatically once the device has completed
  // hEvent": until then its record completes nothing else.
  CUstream s = nullptr;
  CUevent gone = nullptr;
  record_behind_kernel(200'000'000, &s, &gone);
  ASSERT_EQ(cuEventDestroy(gone), CUDA_SUCCESS);
  {
    OtherContext other;
    ASSERT_EQ(other.launch_spin(800'000'000), CUDA_SUCCESS);
    const CUevent later = other.record();
    ASSERT_EQ(cuCtxPushCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);  // the destroyed event's record ran
    CUcontext popped = nullptr;
    ASSERT_EQ(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
    expect_pending_until_waited(later);
  }
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(Api, AWaitOnAnEventOutlivesTheEventsDestruction) {
  // The wait was for the record as it stood; destroying the event does not
  // release it before that record completes.
  CUstream s = nullptr;
  CUevent gate = nullptr;
  record_behind_kernel(400'000'000, &s, &gate);
  {
    OtherContext other;
    ASSERT_EQ(cuStreamWaitEvent(other.stream, gate, 0), CUDA_SUCCESS);
    const CUevent after = other.record();
    ASSERT_EQ(cuEventDestroy(gate), CUDA_SUCCESS);
    expect_pending_until_waited(after);
  }
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(Api, EventsRecordOnlyOnStreamsOfTheirContext) {
  // "hStream ... must be from the same context otherwise
  // CUDA_ERROR_INVALID_HANDLE is returned."
  CUevent mine = nullptr;
  ASSERT_EQ(cuEventCreate(&mine, 0), CUDA_SUCCESS);
  {
    OtherContext other;
    EXPECT_EQ(error_name(cuEventRecord(mine, other.stream)), "CUDA_ERROR_INVALID_HANDLE");
    EXPECT_EQ(error_name(cuEventRecordWithFlags(mine, other.stream, 0)),
              "CUDA_ERROR_INVALID_HANDLE");
  }
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(mine), CUDA_SUCCESS);  // never recorded
  ASSERT_EQ(cuEventDestroy(mine), CUDA_SUCCESS);
}

TEST_F(Api, ADestroyedContextIsPoppedOnlyWhereItIsCurrent) {
  // "If ctx is current to the calling thread then ctx will also be popped
  // ...; if ctx is current to other threads, then ctx will remain current to
  // those threads, and attempting to access ctx from those threads will
  // result in the error CUDA_ERROR_CONTEXT_IS_DESTROYED."
  CUctxCreateParams params{};
  CUcontext below = nullptr, above = nullptr;
  ASSERT_EQ(cuCtxCreate(&below, &params, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxCreate(&above, &params, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy(below), CUDA_SUCCESS);  // not current to this thread
  CUcontext current = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, above);
  ASSERT_EQ(cuCtxPopCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, above);
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, below);  // still on the stack, destroyed
  EXPECT_EQ(error_name(cuCtxSynchronize()), "CUDA_ERROR_CONTEXT_IS_DESTROYED");
  CUdeviceptr p = 0;
  EXPECT_EQ(error_name(cuMemAlloc(&p, 1 << 20)), "CUDA_ERROR_CONTEXT_IS_DESTROYED");
  ASSERT_EQ(cuCtxPopCurrent(&current), CUDA_SUCCESS);

  // Current to another thread when destroyed: it stays current there.
  CUcontext shared = nullptr;
  ASSERT_EQ(cuCtxCreate(&shared, &params, 0, 0), CUDA_SUCCESS);
  std::atomic<int> step{0};
  std::string sync_after;
  std::thread other([&] {
    EXPECT_EQ(cuCtxSetCurrent(shared), CUDA_SUCCESS);
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
    sync_after = error_name(cuCtxSynchronize());
  });
  while (step.load() != 1) std::this_thread::yield();
  ASSERT_EQ(cuCtxDestroy(shared), CUDA_SUCCESS);
  step = 2;
  other.join();
  EXPECT_EQ(sync_after, "CUDA_ERROR_CONTEXT_IS_DESTROYED");
  ASSERT_EQ(cuCtxDestroy(above), CUDA_SUCCESS);
}

// ---- calls prohibited during a capture ----

// Begins a capture in `capture_mode` on a stream of its own, lets another
// thread in `interaction` mode query an unrelated event, then ends the
// capture: what the query got, and how the capture ended.
struct ProhibitionSeen {
  std::string query, end;
};
ProhibitionSeen query_beside_a_capture(CUcontext ctx, CUstreamCaptureMode capture_mode,
                                       CUstreamCaptureMode interaction, bool same_thread) {
  CUevent unrelated = nullptr;
  EXPECT_EQ(cuEventCreate(&unrelated, 0), CUDA_SUCCESS);
  CUstream s = nullptr;
  EXPECT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCapture_v2(s, capture_mode), CUDA_SUCCESS);
  ProhibitionSeen seen;
  const auto query = [&] {
    CUstreamCaptureMode mode = interaction;
    EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
    seen.query = error_name(cuEventQuery(unrelated));
    EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);  // back
  };
  if (same_thread) {
    query();
  } else {
    std::thread other([&] {
      EXPECT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
      query();
    });
    other.join();
  }
  CUgraph g = nullptr;
  seen.end = error_name(cuStreamEndCapture(s, &g));
  if (g) {
    EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy(unrelated), CUDA_SUCCESS);
  return seen;
}

TEST_F(Api, AGlobalCaptureProhibitsOtherThreadsQueriesUnlessRelaxed) {
  // "If ... any other thread has a concurrent capture sequence initiated
  // with CU_STREAM_CAPTURE_MODE_GLOBAL, this thread is prohibited from
  // potentially unsafe API calls"; the capture is invalidated.
  constexpr auto kGlobal = CU_STREAM_CAPTURE_MODE_GLOBAL;
  constexpr auto kLocal = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
  constexpr auto kRelaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
  ProhibitionSeen seen = query_beside_a_capture(ctx_, kGlobal, kGlobal, false);
  EXPECT_EQ(seen.query, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
  EXPECT_EQ(seen.end, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
  // Another thread in the thread-local or relaxed interaction mode, or a
  // capture begun in the thread-local or relaxed mode: allowed.
  for (auto [capture, interaction] : {std::pair{kGlobal, kLocal}, std::pair{kGlobal, kRelaxed},
                                      std::pair{kLocal, kGlobal}, std::pair{kRelaxed, kGlobal}}) {
    seen = query_beside_a_capture(ctx_, capture, interaction, false);
    EXPECT_EQ(seen.query, "CUDA_SUCCESS") << capture << " " << interaction;
    EXPECT_EQ(seen.end, "CUDA_SUCCESS") << capture << " " << interaction;
  }
  // The capturing thread itself: prohibited unless the capture is relaxed
  // or the thread's mode is.
  seen = query_beside_a_capture(ctx_, kLocal, kGlobal, true);
  EXPECT_EQ(seen.query, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
  EXPECT_EQ(seen.end, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
  seen = query_beside_a_capture(ctx_, kRelaxed, kGlobal, true);
  EXPECT_EQ(seen.query, "CUDA_SUCCESS");
  EXPECT_EQ(seen.end, "CUDA_SUCCESS");
  seen = query_beside_a_capture(ctx_, kGlobal, kRelaxed, true);
  EXPECT_EQ(seen.query, "CUDA_SUCCESS");
  EXPECT_EQ(seen.end, "CUDA_SUCCESS");
}

TEST_F(Api, AnInvalidatedCaptureRefusesMoreWorkAndSaysSo) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(launch_spin(1000, s), CUDA_SUCCESS);
  // Synchronising the capturing stream is invalid, and invalidates it.
  EXPECT_EQ(error_name(cuStreamSynchronize(s)), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(error_name(launch_spin(1000, s)), "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
  CUgraph g = nullptr;
  EXPECT_EQ(error_name(cuStreamEndCapture(s, &g)), "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
  EXPECT_EQ(g, nullptr);
  ASSERT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(launch_spin(1000, s), CUDA_SUCCESS);  // usable again
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

// ---- NVML ----

TEST_F(Api, NvmlAgreesWithTheDriverView) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc(&p, 1ull << 30), CUDA_SUCCESS);
  nvmlDevice_t dev;
  ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);
  size_t free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  nvmlMemory_t mem{};
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(dev, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.total, total);
  EXPECT_EQ(mem.free, free);
  EXPECT_EQ(mem.used, total - free);
  nvmlMemory_v2_t mem2{};
  EXPECT_EQ(nvmlDeviceGetMemoryInfo_v2(dev, &mem2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  mem2.version = nvmlMemory_v2;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo_v2(dev, &mem2), NVML_SUCCESS);
  EXPECT_EQ(mem2.used, mem.used);

  unsigned count = 0;
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, nullptr),
            NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(count, 1u);
  nvmlProcessInfo_t info{};
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, &info), NVML_SUCCESS);
  EXPECT_EQ(info.pid, static_cast<unsigned>(getpid()));  // host PID
  // Allocations + context + the suite's module (one 2 MiB granule).
  EXPECT_EQ(info.usedGpuMemory, (1ull << 30) + (300ull << 20) + (2ull << 20));
  EXPECT_EQ(info.usedGpuMemory, mem.used);

  char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
  ASSERT_EQ(nvmlDeviceGetUUID(dev, uuid, sizeof uuid), NVML_SUCCESS);
  CUuuid cu{};
  ASSERT_EQ(cuDeviceGetUuid_v2(&cu, 0), CUDA_SUCCESS);
  char formatted[64];
  const auto* b = reinterpret_cast<const unsigned char*>(cu.bytes);
  std::snprintf(formatted, sizeof formatted,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  EXPECT_STREQ(uuid, formatted);
  nvmlDevice_t by_uuid;
  ASSERT_EQ(nvmlDeviceGetHandleByUUID(uuid, &by_uuid), NVML_SUCCESS);
  EXPECT_EQ(by_uuid, dev);
  char name[NVML_DEVICE_NAME_BUFFER_SIZE], cu_name[64];
  ASSERT_EQ(nvmlDeviceGetName(dev, name, sizeof name), NVML_SUCCESS);
  ASSERT_EQ(cuDeviceGetName(cu_name, sizeof cu_name, 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, cu_name);
  nvmlPciInfo_t pci{};
  ASSERT_EQ(nvmlDeviceGetPciInfo_v3(dev, &pci), NVML_SUCCESS);
  char cu_pci[32];
  ASSERT_EQ(cuDeviceGetPCIBusId(cu_pci, sizeof cu_pci, 0), CUDA_SUCCESS);
  EXPECT_STREQ(pci.busId, cu_pci);

  // Utilisation from the engine timeline: 300 ms of kernels in the last second.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(launch_spin(100'000'000), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  nvmlUtilization_t util{};
  ASSERT_EQ(nvmlDeviceGetUtilizationRates(dev, &util), NVML_SUCCESS);
  EXPECT_GE(util.gpu, 25u);  // 300 ms of the last second (more if the state file is younger)
  // Per process, as a driver's (seen on an H100): only the sample of the
  // sampling period (100 ms) that ended last, stamped at its end, while the
  // process was busy in it. Asked several times a period, the samples tile
  // time and 300 ms of kernels read as 300 ms; asked less often, periods are
  // missed.
  unsigned long long latest = 0;
  {
    // Past the period in which the kernels above ended: the samples below
    // hold only the kernels below.
    std::this_thread::sleep_for(std::chrono::milliseconds(110));
    nvmlProcessUtilizationSample_t before[4];
    unsigned n = 4;
    if (nvmlDeviceGetProcessUtilization(dev, before, &n, 0) == NVML_SUCCESS)
      latest = before[0].timeStamp;
  }
  const auto launched = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(launch_spin(100'000'000), CUDA_SUCCESS);
  unsigned busy_ms = 0, samples_seen = 0;
  bool missed_a_period = false;
  // Two polls' calls less than a period apart see every period between them;
  // on a loaded host they may not, and then periods may be missed.
  auto before_previous = launched;
  for (int poll = 0; poll < 30;
       ++poll, std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    nvmlProcessUtilizationSample_t samples[4];
    unsigned n = 4;
    const auto before = std::chrono::steady_clock::now();
    const nvmlReturn_t r = nvmlDeviceGetProcessUtilization(dev, samples, &n, latest);
    const auto after = std::chrono::steady_clock::now();
    missed_a_period = missed_a_period || after - before_previous > std::chrono::milliseconds(90);
    before_previous = before;
    if (r == NVML_ERROR_NOT_FOUND) continue;
    ASSERT_EQ(r, NVML_SUCCESS);
    ASSERT_EQ(n, 1u) << "one sample, the latest period's";
    EXPECT_EQ(samples[0].pid, static_cast<unsigned>(getpid()));
    if (samples_seen++ == 0) {
      // Too small a buffer (or none) is refused with the count it needs
      // (while the kernels still run, the latest period is still a busy one).
      unsigned none = 0;
      const nvmlReturn_t small = nvmlDeviceGetProcessUtilization(dev, samples, &none, 0);
      const unsigned small_count = none;
      none = 0;
      const nvmlReturn_t null = nvmlDeviceGetProcessUtilization(dev, nullptr, &none, 0);
      if (std::chrono::steady_clock::now() - launched < std::chrono::milliseconds(250)) {
        EXPECT_EQ(small, NVML_ERROR_INSUFFICIENT_SIZE);
        EXPECT_EQ(small_count, 1u);
        EXPECT_EQ(null, NVML_ERROR_INSUFFICIENT_SIZE);
        EXPECT_EQ(none, 1u);
      }
    } else {
      const unsigned long long step = samples[0].timeStamp - latest;
      EXPECT_NEAR(
          static_cast<double>(step % 100'000 < 50'000 ? step % 100'000 : step % 100'000 - 100'000),
          0, 1'000)
          << "periods of 100 ms, stamped at their ends: " << step << " us";
      EXPECT_TRUE(missed_a_period || step < 150'000) << "a period missed";
    }
    latest = samples[0].timeStamp;
    busy_ms += samples[0].smUtil;  // percent of 100 ms
  }
  ASSERT_GE(samples_seen, 1u);
  EXPECT_LE(busy_ms, 300u + samples_seen);  // rounded to whole percents
  if (!missed_a_period) {
    EXPECT_GE(busy_ms, 300u - samples_seen);
  }
  // Nothing ran in the period that ended last: nothing, however asked.
  nvmlProcessUtilizationSample_t none[4];
  unsigned n = 4;
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(dev, none, &n, 0), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(dev, none, &n, latest + 10'000'000),
            NVML_ERROR_NOT_FOUND);

  // An idle second later the device reads idle.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  ASSERT_EQ(nvmlDeviceGetUtilizationRates(dev, &util), NVML_SUCCESS);
  EXPECT_EQ(util.gpu, 0u);

  // The device's own samples come every period, idle ones included, 100 ms
  // apart and stamped at the periods' ends (the processes' stop with their work).
  nvmlValueType_t type{};
  unsigned available = 0;
  ASSERT_EQ(
      nvmlDeviceGetSamples(dev, NVML_GPU_UTILIZATION_SAMPLES, latest, &type, &available, nullptr),
      NVML_SUCCESS);
  EXPECT_GE(available, 11u);  // the 1.2 s idle since the latest process sample
  nvmlSample_t device_samples[128];
  unsigned got = 128;
  ASSERT_EQ(
      nvmlDeviceGetSamples(dev, NVML_GPU_UTILIZATION_SAMPLES, latest, &type, &got, device_samples),
      NVML_SUCCESS);
  EXPECT_EQ(type, NVML_VALUE_TYPE_UNSIGNED_INT);
  EXPECT_EQ(got, available);
  for (unsigned k = 0; k < got; ++k) {
    EXPECT_GT(device_samples[k].timeStamp, latest);
    EXPECT_EQ(device_samples[k].sampleValue.uiVal, 0u) << "idle after the kernels";
    if (k > 0) {
      EXPECT_NEAR(
          static_cast<double>(device_samples[k].timeStamp - device_samples[k - 1].timeStamp),
          100'000, 1'000);
    }
  }
  // As many as fit, oldest first; other kinds are not modelled.
  unsigned two = 2;
  ASSERT_EQ(nvmlDeviceGetSamples(dev, NVML_GPU_UTILIZATION_SAMPLES, latest, &type, &two,
                                 device_samples + 64),
            NVML_SUCCESS);
  EXPECT_EQ(two, 2u);
  EXPECT_EQ(device_samples[64].timeStamp, device_samples[0].timeStamp);
  EXPECT_EQ(nvmlDeviceGetSamples(dev, NVML_TOTAL_POWER_SAMPLES, 0, &type, &two, nullptr),
            NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(
      nvmlDeviceGetSamples(dev, NVML_GPU_UTILIZATION_SAMPLES,
                           device_samples[got - 1].timeStamp + 10'000'000, &type, &two, nullptr),
      NVML_ERROR_NOT_FOUND);

  cuMemFree(p);
  EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
}

TEST_F(Api, NvmlDeliversInjectedXidEventsFromAnotherProcess) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  nvmlDevice_t dev;
  ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(1, &dev), NVML_SUCCESS);
  nvmlEventSet_t set;
  ASSERT_EQ(nvmlEventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceRegisterEvents(dev, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  nvmlEventData_t data{};
  EXPECT_EQ(nvmlEventSetWait_v2(set, &data, 20), NVML_ERROR_TIMEOUT);
  std::thread injector([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(std::system(FAKEGPU_STAT_PATH " --inject-xid 1 79"), 0);
  });
  const nvmlReturn_t r = nvmlEventSetWait_v2(set, &data, 10'000);
  injector.join();
  ASSERT_EQ(r, NVML_SUCCESS);
  EXPECT_EQ(data.eventType, static_cast<unsigned long long>(nvmlEventTypeXidCriticalError));
  EXPECT_EQ(data.eventData, 79u);
  EXPECT_EQ(data.device, dev);
  EXPECT_EQ(nvmlEventSetWait_v2(set, &data, 20), NVML_ERROR_TIMEOUT);
  // Events for a device the set did not register are not delivered.
  ASSERT_EQ(std::system(FAKEGPU_STAT_PATH " --inject-xid 0 48"), 0);
  EXPECT_EQ(nvmlEventSetWait_v2(set, &data, 50), NVML_ERROR_TIMEOUT);
  nvmlEventSetFree(set);
  nvmlShutdown();
}

TEST_F(Api, SurvivesAClientKilledWhileHoldingTheStateLock) {
  // A forked child takes the state mutex with its own mapping and dies holding it.
  const pid_t child = fork();
  if (child == 0) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    (void)lib;
    // The child cannot use CUDA (forked after init); lock the mutex through
    // the state file directly, at its fixed offset in the header.
    const char* path = std::getenv("FAKEGPU_STATE");
    FILE* f = std::fopen(path, "r+");
    if (!f) _exit(3);
    struct Header {
      uint64_t magic;
      uint32_t version, device_count;
      uint64_t total_size;
      pthread_mutex_t mutex;
    };
    void* map = mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
    if (map == MAP_FAILED) _exit(4);
    pthread_mutex_lock(&static_cast<Header*>(map)->mutex);
    _exit(0);  // dies holding the lock
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);  // EOWNERDEAD handled, state repaired
  EXPECT_EQ(launch_spin(1000), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

}  // namespace

int main(int argc, char** argv) {
  // Own state file and two devices for this test process.
  char dir[] = "/tmp/fakegpu-api-test-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 2;
  const std::string state = std::string(dir) + "/state";
  setenv("FAKEGPU_STATE", state.c_str(), 1);
  setenv("FAKEGPU_DEVICES", "H100-80GB:80Gi:132;T4:16Gi:40", 1);
  unsetenv("FAKEGPU_CONTEXT_OVERHEAD");
  unsetenv("FAKEGPU_KERNEL_NS");
  unsetenv("FAKEGPU_DRIVER_VERSION");
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  unlink(state.c_str());
  rmdir(dir);
  return rc;
}
