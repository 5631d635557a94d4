// graph: a CUDA graph captured from a stream (spin kernels, optionally a
// graph-owned allocation: alloc, memset, free nodes), launched once to measure
// the memory it takes, then launched repeatedly so the orchestrator can see
// whether graph launches pass the launch gate.
#include <unistd.h>

#include "tests/gpu/probe/control.hpp"
#include "tests/gpu/probe/device.hpp"
#include "tests/gpu/probe/messages.hpp"
#include "tests/gpu/probe/modes.hpp"
#include "tests/gpu/probe/work_loop.hpp"

namespace cushare::gpuprobe {
namespace {

nlohmann::json resultName(const DriverApi& api, CUresult r) {
  return api.errorName(r);
}

// Captures the graph on `stream`; returns the first failing call's result.
CUresult capture(const Device& dev, CUstream stream, const GraphOptions& o, CUgraph* graph) {
  const DriverApi& api = dev.api();
  CUresult r = api.streamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (r != CUDA_SUCCESS) return r;
  CUresult body = CUDA_SUCCESS;
  CUdeviceptr scratch = 0;
  const size_t bytes = o.alloc_mib << 20;
  if (bytes > 0) body = api.memAllocAsync(&scratch, bytes, stream);
  for (int i = 0; i < o.kernels && body == CUDA_SUCCESS; ++i) {
    body = dev.launchSpin(stream, o.kernel_ns);
  }
  if (bytes > 0 && body == CUDA_SUCCESS) body = api.memsetD8Async(scratch, 0x5a, bytes, stream);
  if (bytes > 0 && body == CUDA_SUCCESS) body = api.memFreeAsync(scratch, stream);
  // Always end the capture, or the stream stays unusable.
  r = api.streamEndCapture(stream, graph);
  return body != CUDA_SUCCESS ? body : r;
}

}  // namespace

int runGraph(const GraphOptions& o) {
  const DriverApi api = DriverApi::load();
  Device dev(api);
  ControlChannel control;
  CUstream stream = nullptr;
  check(api, api.streamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  emit({{"event", "ready"}, {"pid", getpid()}});

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  const CUresult captured = capture(dev, stream, o, &graph);
  CUresult instantiated = CUDA_ERROR_NOT_READY;
  if (captured == CUDA_SUCCESS) instantiated = api.graphInstantiateWithFlags(&exec, graph, 0);
  emit({{"event", "graph_built"},
        {"capture", resultName(api, captured)},
        {"instantiate",
         captured == CUDA_SUCCESS ? resultName(api, instantiated) : nlohmann::json()}});

  if (instantiated == CUDA_SUCCESS) {
    const auto before = dev.memInfo();
    const CUresult launched = api.graphLaunch(exec, stream);
    const CUresult synced = api.streamSynchronize(stream);
    cuuint64_t reserved = 0;
    const CUresult attr = api.deviceGetGraphMemAttribute(
        dev.device(), CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved);
    const auto after = dev.memInfo();
    emit({{"event", "graph_mem"},
          {"launch", resultName(api, launched)},
          {"sync", resultName(api, synced)},
          {"reserved_current", attr == CUDA_SUCCESS ? nlohmann::json(reserved) : nlohmann::json()},
          {"reserved_query", resultName(api, attr)},
          {"mem_free_before", before.free},
          {"mem_free_after", after.free},
          {"mem_total", after.total}});
    if (o.wait_go) {
      for (std::string line; (line = control.nextLine(-1)) != "go";) {
        if (line == "release") break;
      }
    }
    if (launched == CUDA_SUCCESS && synced == CUDA_SUCCESS && o.seconds > 0) {
      const LoopResult run = runLoop(api, stream, o.inflight, o.progress_s, o.seconds, control,
                                     [&] { return api.graphLaunch(exec, stream); });
      emit({{"event", "done"},
            {"n", run.completed},
            {"seconds", run.seconds},
            {"busy_fraction", run.completed * o.kernels * (o.kernel_ns * 1e-9) / run.seconds}});
    }
    api.graphExecDestroy(exec);
  }
  if (graph != nullptr) api.graphDestroy(graph);
  api.deviceGraphMemTrim(dev.device());
  const auto freed = dev.memInfo();
  emit({{"event", "freed"}, {"mem_free", freed.free}, {"mem_total", freed.total}});
  api.streamDestroy(stream);
  return 0;
}

}  // namespace cushare::gpuprobe
