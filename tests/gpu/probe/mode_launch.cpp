// launch: host-side cost of cuLaunchKernel for an empty kernel. Launches are
// timed in batches short enough never to fill the driver's launch queue (a
// full queue would time the GPU, not the launch path), with a synchronize
// between batches that is not timed.
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "tests/gpu/probe/device.hpp"
#include "tests/gpu/probe/messages.hpp"
#include "tests/gpu/probe/modes.hpp"

namespace cushare::gpuprobe {

int runLaunch(const LaunchOptions& o) {
  const DriverApi api = DriverApi::load();
  Device dev(api);
  CUstream stream = nullptr;
  check(api, api.streamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const std::uint64_t batch = std::max<std::uint64_t>(1, o.batch);

  auto timedBatch = [&]() {
    const double t0 = monotonicSeconds();
    for (std::uint64_t i = 0; i < batch; ++i) check(api, dev.launchEmpty(stream), "cuLaunchKernel");
    const double t1 = monotonicSeconds();
    check(api, api.streamSynchronize(stream), "cuStreamSynchronize");
    return (t1 - t0) * 1e9 / static_cast<double>(batch);
  };
  for (int i = 0; i < 4; ++i) timedBatch();  // module load, lazy init, lease acquisition

  std::vector<double> per_launch_ns;
  for (std::uint64_t done = 0; done < o.count; done += batch) per_launch_ns.push_back(timedBatch());
  std::sort(per_launch_ns.begin(), per_launch_ns.end());
  double sum = 0;
  for (double v : per_launch_ns) sum += v;
  emit({{"event", "launch"},
        {"pid", getpid()},
        {"count", per_launch_ns.size() * batch},
        {"batch", batch},
        {"ns_per_launch_median", per_launch_ns[per_launch_ns.size() / 2]},
        {"ns_per_launch_mean", sum / static_cast<double>(per_launch_ns.size())},
        {"ns_per_launch_min", per_launch_ns.front()}});
  api.streamDestroy(stream);
  return 0;
}

}  // namespace cushare::gpuprobe
