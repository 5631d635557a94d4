// realprog.graph_capture: a CUDA graph captured as frameworks capture them
// (PyTorch's CUDA graphs, a serving engine's decode step), in a process whose
// first kernels are the captured ones:
//   - a global-mode capture on stream A with a stream-ordered allocation,
//     kernels, a fork to stream B (B waits on an event recorded in A and so
//     joins the capture), kernels on B, the join back (A waits on B's event),
//     the allocation freed, the capture ended;
//   - while it captures, both streams report themselves capturing, and no
//     captured launch waits: nothing of it runs on the GPU until the graph is;
//   - the graph instantiated and launched three times, then kernels launched
//     directly: the gate counts the graph launches and the direct launches,
//     never the captured ones;
//   - an allocation of the whole program.quota refused with CUDA_ERROR_OUT_OF_MEMORY.
// Usage: realprog_graph_capture QUOTA_BYTES KERNELS_FATBIN
#include "realprog.hpp"

using namespace realprog;

namespace {

constexpr int kCapturedPerStream = 64;  // far past what the gate lets queue before it has measured
constexpr int kGraphLaunches = 3;
constexpr int kDirectLaunches = 5;
constexpr int kLeftRunning = 3;

void expect_capturing(const Runtime& rt, CUstream s, const char* which) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  RP_OK(rt.StreamIsCapturing(s, &status));
  check(status == CU_STREAM_CAPTURE_STATUS_ACTIVE, std::string(which) + " is not capturing");
}

}  // namespace

int main(int argc, char** argv) {
  const OneImageProgram program(argc, argv);
  const Runtime& rt = program.rt;

  const CUlibrary lib = program.load_library();
  CUkernel kernel = nullptr;
  RP_OK(rt.LibraryGetKernel(&kernel, lib, "vec_add"));
  const auto f = reinterpret_cast<CUfunction>(kernel);

  CUstream a = nullptr, b = nullptr;
  RP_OK(rt.StreamCreate(&a, CU_STREAM_NON_BLOCKING));
  RP_OK(rt.StreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CUevent fork = nullptr, join = nullptr;
  RP_OK(rt.EventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  RP_OK(rt.EventCreate(&join, CU_EVENT_DISABLE_TIMING));

  RP_OK(rt.StreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_GLOBAL));
  const std::size_t bytes = 16u << 20;
  CUdeviceptr buf = 0;
  RP_OK(rt.MemAllocAsync(&buf, bytes, a));
  int n = static_cast<int>(bytes / sizeof(float) / 2);
  CUdeviceptr half = buf + bytes / 2;
  void* params[] = {&buf, &buf, &half, &n};
  for (int i = 0; i < kCapturedPerStream; ++i)
    RP_OK(rt.LaunchKernel(f, 64, 1, 1, 256, 1, 1, 0, a, params, nullptr));
  RP_OK(rt.EventRecord(fork, a));
  RP_OK(rt.StreamWaitEvent(b, fork, 0));
  expect_capturing(rt, b, "the forked stream");
  for (int i = 0; i < kCapturedPerStream; ++i)
    RP_OK(rt.LaunchKernel(f, 64, 1, 1, 256, 1, 1, 0, b, params, nullptr));
  RP_OK(rt.EventRecord(join, b));
  RP_OK(rt.StreamWaitEvent(a, join, 0));
  expect_capturing(rt, a, "the origin stream");
  RP_OK(rt.MemFreeAsync(buf, a));
  CUgraph graph = nullptr;
  RP_OK(rt.StreamEndCapture(a, &graph));
  CUstreamCaptureStatus after = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  RP_OK(rt.StreamIsCapturing(b, &after));
  check(after == CU_STREAM_CAPTURE_STATUS_NONE, "the forked stream still captures after the end");

  CUgraphExec exec = nullptr;
  RP_OK(rt.GraphInstantiateWithFlags(&exec, graph, 0));
  for (int i = 0; i < kGraphLaunches; ++i) RP_LAUNCH(rt.GraphLaunch(exec, a));
  RP_OK(rt.StreamSynchronize(a));

  CUdeviceptr data = 0;
  RP_OK(rt.MemAlloc(&data, 1 << 20));
  int m = (1 << 20) / sizeof(float) / 2;
  CUdeviceptr second = data + (1 << 19);
  void* direct[] = {&data, &data, &second, &m};
  for (int i = 0; i < kDirectLaunches; ++i)
    RP_LAUNCH(rt.LaunchKernel(f, 64, 1, 1, 256, 1, 1, 0, b, direct, nullptr));
  RP_OK(rt.StreamSynchronize(b));
  CUdeviceptr over = 0;
  RP_EXPECT(CUDA_ERROR_OUT_OF_MEMORY, rt.MemAlloc(&over, program.quota));
  // The last kernels are left running at exit, on the legacy stream (no
  // synchronisation, no stream destroyed after them): they count as well.
  for (int i = 0; i < kLeftRunning; ++i)
    RP_LAUNCH(rt.LaunchKernel(f, 64, 1, 1, 256, 1, 1, 0, nullptr, direct, nullptr));

  RP_OK(rt.MemFree(data));
  RP_OK(rt.GraphExecDestroy(exec));
  RP_OK(rt.GraphDestroy(graph));
  RP_OK(rt.DeviceGraphMemTrim(program.dev));
  RP_OK(rt.EventDestroy(fork));
  RP_OK(rt.EventDestroy(join));
  RP_OK(rt.StreamDestroy(a));
  RP_OK(rt.StreamDestroy(b));
  RP_OK(rt.LibraryUnload(lib));
  RP_OK(rt.DevicePrimaryCtxRelease(program.dev));
  return report();
}
