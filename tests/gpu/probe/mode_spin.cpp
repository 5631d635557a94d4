// spin: a busy tenant. Keeps `inflight` spin kernels of a known length queued
// for a wall-clock duration (or runs them in bursts, on a duty cycle) and
// reports completions as progress lines; the orchestrator turns completions x
// kernel length into GPU time.
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "tests/gpu/probe/control.hpp"
#include "tests/gpu/probe/device.hpp"
#include "tests/gpu/probe/messages.hpp"
#include "tests/gpu/probe/modes.hpp"
#include "tests/gpu/probe/work_loop.hpp"

namespace cushare::gpuprobe {

int runSpin(const SpinOptions& o) {
  const DriverApi api = DriverApi::load();
  Device dev(api);
  ControlChannel control;
  CUstream stream = nullptr;
  check(api, api.streamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  emit({{"event", "ready"}, {"pid", getpid()}, {"kernel_ns", o.kernel_ns}});
  if (o.wait_go) {
    for (std::string line; (line = control.nextLine(-1)) != "go";) {
      if (line == "release") return 0;
    }
  }
  const auto launch = [&] { return dev.launchSpin(stream, o.kernel_ns); };
  const auto burst_units = static_cast<std::uint64_t>(o.busy_ms * 1e6 / o.kernel_ns + 0.5);
  const LoopResult run =
      o.period_ms > 0 ? runDutyLoop(api, stream, o.inflight, o.seconds, o.period_ms / 1000.0,
                                    std::max<std::uint64_t>(burst_units, 1), control, launch)
                      : runLoop(api, stream, o.inflight, o.progress_s, o.seconds, control, launch);
  emit({{"event", "done"},
        {"n", run.completed},
        {"seconds", run.seconds},
        {"kernel_ns", o.kernel_ns},
        {"busy_fraction",
         run.seconds > 0 ? run.completed * (o.kernel_ns * 1e-9) / run.seconds : 0.0}});
  api.streamDestroy(stream);
  return 0;
}

}  // namespace cushare::gpuprobe
