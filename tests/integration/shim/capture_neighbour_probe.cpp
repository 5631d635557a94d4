// capture_neighbour_probe: one thread captures a CUDA graph in the global
// mode (as frameworks capture them) while another thread of the process
// launches kernels on a stream of its own, fast enough to be held by the
// launch gate's queue bound over and over (linked with -lcuda, run with the
// shim preloaded). The driver prohibits a thread in the default interaction
// mode from synchronisations and queries while another thread captures in
// the global mode, and invalidates that capture: the gate's waits on the
// launching thread must not do that. The capture is ended after the other
// thread's last launch, the graph launched and waited for. With --query the
// other thread instead queries an event of its own once (cuEventQuery), in
// the default interaction mode: how the driver answers is its rule itself.
// Prints one JSON line: {"end_capture", "graph_launch", "launches" (the other
// thread's, plus the graph launch), "captured" (kernels in the graph),
// "query" (with --query: the other thread's answer)}.
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "probe_driver.hpp"
#include "samples/spin_kernel_ptx.hpp"

namespace {

using probe::expect;

CUresult launch_spin(CUfunction spin, CUstream stream, std::uint64_t us) {
  std::uint64_t ns = us * 1000;
  void* params[] = {&ns};
  return cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
}

}  // namespace

int main(int argc, char** argv) try {
  int launches = 200;
  std::uint64_t kernel_us = 200;
  int captured = 8;
  bool query = false;
  CLI::App app{"a global-mode capture beside another thread's held launches"};
  app.add_option("--launches", launches, "kernels the other thread launches")
      ->check(CLI::Range(1, 100000));
  app.add_option("--kernel-us", kernel_us, "duration of each of them");
  app.add_option("--captured", captured, "kernels captured into the graph")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--query", query, "the other thread queries an event instead of launching");
  CLI11_PARSE(app, argc, argv);

  CUcontext ctx = nullptr;
  probe::start(&ctx);
  CUmodule module = nullptr;
  expect(cuModuleLoadData(&module, samples::kSpinKernelPtx), "cuModuleLoadData");
  CUfunction spin = nullptr;
  expect(cuModuleGetFunction(&spin, module, "spin"), "cuModuleGetFunction");
  CUstream capturing = nullptr;
  CUstream launching = nullptr;
  expect(cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  expect(cuStreamCreate(&launching, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  expect(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  for (int i = 0; i < captured; ++i)
    expect(launch_spin(spin, capturing, kernel_us), "a captured cuLaunchKernel");

  // The other thread launches while the capture is under way.
  std::atomic<int> launched{0};
  std::string launch_error;
  std::string query_answer;
  std::thread other([&] {
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
      launch_error = "cuCtxSetCurrent";
      return;
    }
    if (query) {
      CUevent ev = nullptr;
      if (cuEventCreate(&ev, 0) != CUDA_SUCCESS) {
        launch_error = "cuEventCreate";
        return;
      }
      query_answer = probe::name_of(cuEventQuery(ev));
      cuEventDestroy(ev);
      return;
    }
    for (int i = 0; i < launches; ++i) {
      const CUresult r = launch_spin(spin, launching, kernel_us);
      if (r != CUDA_SUCCESS) {
        launch_error = "cuLaunchKernel: " + probe::name_of(r);
        return;
      }
      ++launched;
    }
  });
  other.join();

  CUgraph graph = nullptr;
  const CUresult ended = cuStreamEndCapture(capturing, &graph);
  CUresult graph_launch = CUDA_ERROR_INVALID_VALUE;
  if (ended == CUDA_SUCCESS) {
    CUgraphExec exec = nullptr;
    expect(cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
    graph_launch = cuGraphLaunch(exec, capturing);
    expect(cuStreamSynchronize(capturing), "cuStreamSynchronize");
  }
  expect(cuStreamSynchronize(launching), "cuStreamSynchronize");
  if (!launch_error.empty()) probe::fail(launch_error);
  const int graph_launches = graph_launch == CUDA_SUCCESS ? 1 : 0;
  std::printf("%s\n", nlohmann::json{{"end_capture", probe::name_of(ended)},
                                     {"graph_launch", probe::name_of(graph_launch)},
                                     {"launches", launched.load() + graph_launches},
                                     {"captured", captured},
                                     {"query", query ? nlohmann::json(query_answer)
                                                     : nlohmann::json(nullptr)}}
                          .dump()
                          .c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "capture_neighbour_probe: %s\n", e.what());
  return 2;
}
