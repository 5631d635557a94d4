#include "scenario.hpp"

#include "region_fixture.hpp"

namespace cushare::tools::testing {

namespace {
constexpr std::uint64_t kGi = 1ull << 30, kMi = 1ull << 20;
}

std::vector<GpuInfo> scenario_gpus() {
  return {GpuInfo{0, kUuid0, "NVIDIA H100 80GB HBM3", 80 * kGi},
          GpuInfo{1, kUuid1, "NVIDIA H100 80GB HBM3", 80 * kGi}};
}

void write_scenario_node(const std::filesystem::path& run_dir, bool daemon_heartbeat) {
  const std::uint64_t beat = daemon_heartbeat ? kNowMono - 200'000'000 : 0;

  RegionPair a = make_regions("team-a", kNowUnix - 3600ull * 1'000'000'000, shm::kCreatedByPlugin);
  set_gpu(a, 0, kUuid0, 8 * kGi, 50, 50, shm::ComputeMode::kCapped);
  add_process(a, 0, 7, 41234, 0, 3 * kGi, 300 * kMi, kNowMono - 500'000'000);
  add_process(a, 3, 9, 0, 0, 512 * kMi, 0, kNowMono - 1'500'000'000);
  a.limits->daemon_heartbeat_ns = beat;
  a.limits->daemon_pid = 4242;
  a.limits->quantum_ns = 10'000'000;
  a.limits->gpus[0].share_target_ppm = 500'000;
  a.limits->gpus[0].share_achieved_ppm = 487'000;
  a.limits->gpus[0].lease_grants = 1234;
  a.limits->gpus[0].granted_ns = 61'700'000'000;
  a.limits->gpus[0].handoffs = 1200;
  a.usage->gpus[0].launches = 98765;
  a.usage->gpus[0].throttled_launches = 4321;
  a.usage->gpus[0].throttled_ns = 12'300'000'000;
  a.usage->gpus[0].busy_processes = 1;
  a.usage->gpus[0].busy_ns = 60'100'000'000;
  a.usage->gpus[0].oom_refusals = 2;
  a.usage->gpus[0].last_oom_request_bytes = 2 * kGi;
  a.usage->gpus[0].last_oom_unix_ns = kNowUnix - 60ull * 1'000'000'000;
  write_regions(a, run_dir / "alloc" / "team-a");

  RegionPair b = make_regions("team-b-training-job-with-a-long-name",
                              kNowUnix - 7200ull * 1'000'000'000, shm::kCreatedByPlugin);
  set_gpu(b, 0, kUuid0, shm::kUnlimited, 30, 30, shm::ComputeMode::kBurst);
  add_process(b, 0, 1, 51000, 0, 1536 * kMi, 0, kNowMono - 100'000'000);
  b.limits->daemon_heartbeat_ns = beat;
  b.limits->daemon_pid = 4242;
  b.limits->quantum_ns = 10'000'000;
  b.limits->gpus[0].share_target_ppm = 500'000;
  b.limits->gpus[0].share_achieved_ppm = 513'000;
  b.limits->gpus[0].lease_holder = 1;
  b.usage->gpus[0].launches = 5000;
  write_regions(b, run_dir / "alloc" / "team-b-training-job-with-a-long-name");

  RegionPair c = make_regions("laptop", kNowUnix - 60ull * 1'000'000'000, shm::kCreatedStandalone);
  set_gpu(c, 0, shm::kAnyGpu, 512 * kMi, 100, 100, shm::ComputeMode::kBurst);
  write_regions(c, run_dir / "alloc" / "laptop", /*with_usage=*/false);

  RegionPair future = make_regions("zz-future", kNowUnix, shm::kCreatedByPlugin);
  future.limits->header.layout_version = shm::kLayoutVersion + 1;
  write_regions(future, run_dir / "alloc" / "zz-future");
}

}  // namespace cushare::tools::testing
