// alloc: fill the quota in fixed steps with cuMemAlloc_v2 until the driver (or
// the shim) refuses, report what was obtained and what cuMemGetInfo_v2 said,
// optionally hold the memory (busy or idle) until released.
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "tests/gpu/probe/control.hpp"
#include "tests/gpu/probe/device.hpp"
#include "tests/gpu/probe/messages.hpp"
#include "tests/gpu/probe/modes.hpp"
#include "tests/gpu/probe/work_loop.hpp"

namespace cushare::gpuprobe {

int runAlloc(const AllocOptions& o) {
  const DriverApi api = DriverApi::load();
  Device dev(api);
  ControlChannel control;
  size_t device_total = 0;
  check(api, api.deviceTotalMem(&device_total, dev.device()), "cuDeviceTotalMem_v2");
  const auto before = dev.memInfo();
  emit({{"event", "ready"},
        {"pid", getpid()},
        {"mem_total", before.total},
        {"mem_free", before.free},
        {"device_total", device_total},
        {"resolved_via", api.resolved_via}});
  if (o.wait_go) {
    for (std::string line; (line = control.nextLine(-1)) != "go";) {
      if (line == "release") return 0;
    }
  }

  const size_t step = o.step_mib << 20;
  std::vector<CUdeviceptr> blocks;
  std::string stop_error;
  for (;;) {
    if (o.max_mib != 0 && (blocks.size() + 1) * step > (o.max_mib << 20)) break;
    CUdeviceptr p = 0;
    CUresult r = api.memAlloc(&p, step);
    if (r != CUDA_SUCCESS) {
      stop_error = api.errorName(r);
      break;
    }
    blocks.push_back(p);
    if (o.pace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.pace_ms));
  }
  const auto after = dev.memInfo();
  emit({{"event", "allocated"},
        {"obtained", blocks.size() * step},
        {"count", blocks.size()},
        {"step", step},
        {"stop_error", stop_error.empty() ? nlohmann::json() : nlohmann::json(stop_error)},
        {"mem_free_after", after.free},
        {"mem_total_after", after.total}});

  if (o.hold) {
    if (o.spin_ns > 0) {
      CUstream stream = nullptr;
      check(api, api.streamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      runLoop(api, stream, o.inflight, o.progress_s, 0, control,
              [&] { return dev.launchSpin(stream, o.spin_ns); });
      api.streamDestroy(stream);
    } else {
      while (control.nextLine(-1) != "release") {
      }
    }
  }
  for (CUdeviceptr p : blocks) check(api, api.memFree(p), "cuMemFree_v2");
  const auto freed = dev.memInfo();
  emit({{"event", "freed"}, {"mem_free", freed.free}, {"mem_total", freed.total}});
  return 0;
}

}  // namespace cushare::gpuprobe
