// cushare-gpu-probe: the Driver API workloads of the real-GPU acceptance suite
// (tests/gpu/run.sh). The same binary runs on a GPU and on fakegpu; every mode
// reports through prefixed JSON lines on stdout (messages.hpp).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "tests/gpu/probe/driver_api.hpp"
#include "tests/gpu/probe/messages.hpp"
#include "tests/gpu/probe/modes.hpp"

using namespace cushare::gpuprobe;

// Every mode's failure (a CUDA error, or any other exception, building the
// command line included) is an "error" event, a message and exit status 1.
int main(int argc, char** argv) try {
  CLI::App app{"cushare-gpu-probe: Driver API workloads for the GPU acceptance suite"};
  app.require_subcommand(1);

  AllocOptions alloc;
  auto* a = app.add_subcommand("alloc", "allocate in steps until refused; optionally hold");
  a->add_option("--step-mib", alloc.step_mib, "allocation step")->check(CLI::PositiveNumber);
  a->add_option("--max-mib", alloc.max_mib, "stop after this much (0: until refused)");
  a->add_flag("--wait-go", alloc.wait_go, "wait for 'go' on stdin before allocating");
  a->add_option("--pace-ms", alloc.pace_ms, "pause between steps (interleaves processes)")
      ->check(CLI::NonNegativeNumber);
  a->add_flag("--hold", alloc.hold, "keep the memory until 'release' on stdin");
  a->add_option("--spin-ns", alloc.spin_ns, "while holding, run spin kernels of this length");
  a->add_option("--inflight", alloc.inflight, "kernels kept queued")->check(CLI::PositiveNumber);

  SpinOptions spin;
  auto* s = app.add_subcommand("spin", "busy tenant: spin kernels for a wall-clock time");
  s->add_option("--kernel-ns", spin.kernel_ns, "kernel length")->check(CLI::PositiveNumber);
  s->add_option("--seconds", spin.seconds, "how long to run (0: until released)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--inflight", spin.inflight, "kernels kept queued")->check(CLI::PositiveNumber);
  s->add_option("--progress-ms", spin.progress_s, "progress line interval (ms)")
      ->check(CLI::PositiveNumber)
      ->transform([](const std::string& v) { return std::to_string(std::stod(v) / 1000.0); });
  s->add_flag("--wait-go", spin.wait_go, "wait for 'go' on stdin before starting");
  s->add_option("--busy-ms", spin.busy_ms, "kernels per period, in ms of kernel time")
      ->check(CLI::PositiveNumber);
  auto* period = s->add_option("--period-ms", spin.period_ms, "run in bursts, one per period")
                     ->check(CLI::PositiveNumber);
  s->get_option("--busy-ms")->needs(period);
  period->needs(s->get_option("--busy-ms"));

  LaunchOptions launch;
  auto* l = app.add_subcommand("launch", "host cost of launching an empty kernel");
  l->add_option("--count", launch.count, "launches to time")->check(CLI::PositiveNumber);
  l->add_option("--batch", launch.batch, "launches between synchronizes")
      ->check(CLI::Range(1, 1000));

  GraphOptions graph;
  auto* g = app.add_subcommand("graph", "captured CUDA graph: memory and gated launches");
  g->add_option("--kernels", graph.kernels, "spin kernels per graph")->check(CLI::PositiveNumber);
  g->add_option("--kernel-ns", graph.kernel_ns, "kernel length")->check(CLI::PositiveNumber);
  g->add_option("--alloc-mib", graph.alloc_mib, "graph-owned allocation size");
  g->add_option("--seconds", graph.seconds, "launch repeatedly for this long")
      ->check(CLI::NonNegativeNumber);
  g->add_flag("--wait-go", graph.wait_go, "after the first launch, wait for 'go'");
  g->add_option("--inflight", graph.inflight, "graphs kept queued")->check(CLI::PositiveNumber);

  NvmlOptions nvml;
  auto* n = app.add_subcommand("nvml", "NVML's memory view (as nvidia-smi sees it)");
  n->add_option("--uuid", nvml.uuid, "device UUID (default: NVML index 0)");

  SamplingOptions sampling;
  auto* ns = app.add_subcommand(
      "nvml-sampling",
      "NVML's utilisation samples, raw and as the daemon's ground truth reads them");
  ns->add_option("--uuid", sampling.uuid, "device UUID (default: the first NVML lists)");
  ns->add_option("--seconds", sampling.seconds, "how long to read")->check(CLI::PositiveNumber);
  ns->add_option("--interval-ms", sampling.interval_ms, "time between readings")
      ->check(CLI::Range(10, 10000));
  ns->add_option("--collect-ms", sampling.collect_ms,
                 "time between the samples gathered between readings")
      ->check(CLI::Range(5, 10000));

  CLI11_PARSE(app, argc, argv);
  if (a->parsed()) return runAlloc(alloc);
  if (s->parsed()) return runSpin(spin);
  if (l->parsed()) return runLaunch(launch);
  if (g->parsed()) return runGraph(graph);
  if (n->parsed()) return runNvml(nvml);
  if (ns->parsed()) return runSampling(sampling);
  return 2;
} catch (const CudaError& e) {
  emit({{"event", "error"}, {"message", e.what()}, {"code", static_cast<int>(e.code())}});
  std::fprintf(stderr, "cushare-gpu-probe: %s\n", e.what());
  return 1;
} catch (const std::exception& e) {
  emit({{"event", "error"}, {"message", e.what()}});
  std::fprintf(stderr, "cushare-gpu-probe: %s\n", e.what());
  return 1;
}
