// The daemon's I/O-light pieces: /proc parsing, metrics text, options.
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "scheduler/daemon_options.hpp"
#include "scheduler/host_pids.hpp"
#include "scheduler/metrics.hpp"
#include "shm/proc_identity.hpp"

namespace cushare::sched {
namespace {

TEST(HostPids, InnermostNspidIsTheLastEntry) {
  EXPECT_EQ(innermost_nspid("Name:\tx\nNSpid:\t4242\t17\t1\nPPid:\t1\n"), 1u);
  EXPECT_EQ(innermost_nspid("NSpid:\t99\n"), 99u);
  EXPECT_EQ(innermost_nspid("Name:\tx\n"), std::nullopt);
  EXPECT_EQ(innermost_nspid("NSpid:\tabc\n"), std::nullopt);
}

TEST(HostPids, ScanFindsThisProcessByItsSlotIdentity) {
  auto self = shm::self_identity();
  ASSERT_TRUE(self.has_value());
  const HostPidTable table = HostPidTable::scan();
  EXPECT_EQ(table.find({self->pidns_inode, self->pid, self->start_time}),
            static_cast<std::uint32_t>(getpid()));
  // A reused PID (other start time) never matches.
  EXPECT_EQ(table.find({self->pidns_inode, self->pid, self->start_time + 1}), std::nullopt);
}

// An allocation entry as the read model has it, with distinct figures so a
// family that took another one's value shows.
tools::AllocationGpu entry(const std::string& uuid) {
  tools::AllocationGpu g;
  g.uuid = uuid;
  g.memory_limit_bytes = 4096;
  g.used_bytes = 1024;
  g.mode = "capped";
  g.compute_limit_pct = 30;
  g.weight = 30;
  g.share_target_ppm = 300'000;
  g.share_achieved_ppm = 295'000;
  g.lease_grants = 11;
  g.handoffs = 7;
  g.busy_ns = 9'000'000'000;  // the usage region's copy: never exported
  g.launches = 13;
  g.throttled_launches = 5;
  g.throttled_ns = 2'500'000'000;
  g.oom_refusals = 3;
  g.processes = 9;  // counted from slots the tenant writes: never exported
  g.over_quota_kills = 2;
  g.unleased_busy_ns = 250'000'000;
  return g;
}

tools::Allocation allocation(const std::string& id, std::vector<tools::AllocationGpu> gpus) {
  tools::Allocation a;
  a.id = id;
  a.has_usage = true;
  a.gpus = std::move(gpus);
  return a;
}

constexpr const char* kPodA =
    "{allocation=\"pod-a\",gpu=\"3\",UUID=\"GPU-1\",pod=\"trainer-0\",namespace=\"ml\","
    "container=\"main\"}";

MetricsSnapshot two_allocations() {
  MetricsSnapshot m;
  m.gpus = {tools::GpuInfo{.index = 3, .uuid = "GPU-1"}};
  m.allocations.push_back(allocation("pod-a", {entry("GPU-1")}));
  auto unlimited = entry("*");
  unlimited.memory_limit_bytes.reset();
  m.allocations.push_back(allocation("pod-\"b\"", {unlimited}));
  m.daemon.tenants.push_back(TenantFigures{.allocation = "pod-a",
                                           .entry = 0,
                                           .gpu_uuid = "GPU-1",
                                           .processes = 2,
                                           .gpu_time_ns = 1'500'000'000,
                                           .busy_scale = 1.125});
  // A '*' entry whose GPU is not known yet: UUID '*', no index.
  m.daemon.tenants.push_back(TenantFigures{.allocation = "pod-\"b\"", .entry = 0, .gpu_uuid = "*"});
  m.daemon.pods["pod-a"] = shm::PodIdentity{"trainer-0", "ml", "main"};
  m.daemon.reclaimed_slots_total = 4;
  m.daemon.reclaimed_bytes_total = 8192;
  m.daemon.ledger_repairs_total = 1;
  return m;
}

TEST(Metrics, RendersPrometheusFamiliesWithLabels) {
  const std::string text = render_prometheus(two_allocations());
  EXPECT_NE(text.find("# TYPE cushare_memory_used_bytes gauge"), std::string::npos);
  const std::string a_labels = kPodA;
  EXPECT_NE(text.find("cushare_memory_quota_bytes" + a_labels + " 4096"), std::string::npos);
  EXPECT_EQ(text.find("cushare_memory_quota_bytes{allocation=\"pod-\\\"b\\\""), std::string::npos)
      << "unlimited quota is not exported";
  EXPECT_NE(text.find("cushare_share_target_ratio" + a_labels + " 0.3"), std::string::npos);
  // The mode can change live: it is a series of its own, never a label of the others.
  EXPECT_NE(text.find("# TYPE cushare_compute_mode_info gauge\ncushare_compute_mode_info" +
                      a_labels.substr(0, a_labels.size() - 1) + ",mode=\"capped\"} 1\n"),
            std::string::npos);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("mode=") != std::string::npos) {
      EXPECT_TRUE(line.starts_with("cushare_compute_mode_info{")) << line;
    }
  }
  EXPECT_NE(
      text.find("cushare_lease_handoffs_total{allocation=\"pod-\\\"b\\\"\",gpu=\"\",UUID=\"*\","
                "pod=\"\",namespace=\"\",container=\"\"} 7\n"),
      std::string::npos)
      << text;
  // A burst entry's time is not scaled: no series.
  EXPECT_EQ(text.find("cushare_cap_busy_scale{allocation=\"pod-\\\"b"), std::string::npos);
}

// Each family renders the figure of its own name: the read model's entry, or
// what only the daemon knows (verified processes, the GPU time it attributed).
TEST(Metrics, EachFamilyTakesItsFigure) {
  const std::string text = render_prometheus(two_allocations());
  const std::string a = kPodA;
  for (const std::string& want : {
           "cushare_memory_used_bytes" + a + " 1024\n",
           "cushare_gpu_time_seconds_total" + a + " 1.5\n",
           "cushare_share_achieved_ratio" + a + " 0.295\n",
           "cushare_compute_limit_ratio" + a + " 0.3\n",
           "cushare_compute_weight" + a + " 30\n",
           "cushare_cap_busy_scale" + a + " 1.125\n",
           "cushare_throttled_seconds_total" + a + " 2.5\n",
           "cushare_throttled_launches_total" + a + " 5\n",
           "cushare_launches_total" + a + " 13\n",
           "cushare_lease_grants_total" + a + " 11\n",
           "cushare_lease_handoffs_total" + a + " 7\n",
           "cushare_oom_refusals_total" + a + " 3\n",
           "cushare_processes" + a + " 2\n",
           "cushare_usage_region_valid" + a + " 1\n",
           "cushare_over_quota_kills_total" + a + " 2\n",
           "cushare_unleased_gpu_time_seconds_total" + a + " 0.25\n",
           std::string("cushare_allocations 2\n"),
           std::string("cushare_reclaimed_slots_total 4\n"),
           std::string("cushare_reclaimed_bytes_total 8192\n"),
           std::string("cushare_ledger_repairs_total 1\n"),
       }) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "not in:\n" << text;
  }
}

TEST(Metrics, ADamagedUsageRegionKeepsTheLimitsFigures) {
  MetricsSnapshot m = two_allocations();
  tools::AllocationGpu& g = m.allocations[0].gpus[0];
  m.allocations[0].has_usage = false;
  g.used_bytes = g.launches = 0;  // what the read model has without a usage region
  const std::string text = render_prometheus(m);
  const std::string a = kPodA;
  EXPECT_NE(text.find("cushare_usage_region_valid" + a + " 0\n"), std::string::npos);
  EXPECT_NE(text.find("cushare_memory_quota_bytes" + a + " 4096\n"), std::string::npos);
  EXPECT_NE(text.find("cushare_compute_limit_ratio" + a + " 0.3\n"), std::string::npos);
}

// Only tenants the daemon manages have series, and only while the read model
// has their allocation and entry; share figures the read model does not
// believe (no live daemon heartbeat) read 0.
TEST(Metrics, OnlyTheDaemonsTenantsFoundInTheReadModel) {
  MetricsSnapshot m = two_allocations();
  m.allocations.push_back(allocation("not-arbitrated", {entry("GPU-1")}));
  m.daemon.tenants.push_back(TenantFigures{.allocation = "gone", .gpu_uuid = "GPU-1"});
  m.daemon.tenants.push_back(TenantFigures{.allocation = "pod-a", .entry = 5, .gpu_uuid = "GPU-1"});
  m.allocations[0].gpus[0].share_target_ppm.reset();
  const std::string text = render_prometheus(m);
  EXPECT_EQ(text.find("not-arbitrated"), std::string::npos);
  EXPECT_EQ(text.find("gone"), std::string::npos);
  EXPECT_NE(text.find("cushare_allocations 3\n"), std::string::npos) << "every managed allocation";
  EXPECT_NE(text.find(std::string("cushare_share_target_ratio") + kPodA + " 0\n"),
            std::string::npos);
  std::istringstream lines(text);
  int launch_series = 0;
  for (std::string line; std::getline(lines, line);)
    launch_series += line.starts_with("cushare_launches_total{") ? 1 : 0;
  EXPECT_EQ(launch_series, 2);
}

TEST(DaemonOptions, ConfigFileAndFlags) {
  DaemonOptions o;
  apply_config_json(R"({"quantum_ms": 20, "metrics_addr": "127.0.0.1:9400", "cap_bank_ms": 5})", o);
  EXPECT_EQ(o.daemon.scheduler.quantum_ns, 20'000'000u);
  EXPECT_EQ(o.daemon.scheduler.cap_bank_ns, 5'000'000u);
  EXPECT_EQ(o.metrics_addr, "127.0.0.1:9400");
  EXPECT_THROW(apply_config_json(R"({"quantum": 20})", o), std::runtime_error);
  EXPECT_THROW(apply_config_json(R"({"quantum_ms": "x"})", o), std::runtime_error);
  EXPECT_THROW(apply_config_json(R"({"quantum_ms": -1})", o), std::runtime_error);
  EXPECT_THROW(apply_config_json("not json", o), std::runtime_error);
  apply_config_json(R"({"realtime_priority": 10})", o);
  EXPECT_EQ(o.realtime_priority, 10);
  EXPECT_THROW(apply_config_json(R"({"realtime_priority": 100})", o), std::runtime_error);
  EXPECT_THROW(apply_config_json(R"({"realtime_priority": 1.5})", o), std::runtime_error);
  apply_config_json(R"({"lease_per_handoff": 40})", o);
  EXPECT_EQ(o.daemon.scheduler.lease_per_handoff, 40u);
  for (const char* bad_budget : {R"({"lease_per_handoff": 0})", R"({"lease_per_handoff": 1001})",
                                 R"({"lease_per_handoff": 2.5})", R"({"lease_per_handoff": -3})"})
    EXPECT_THROW(apply_config_json(bad_budget, o), std::runtime_error) << bad_budget;

  const char* argv[] = {"cushared", "--run-dir",      "/tmp/x",    "--quantum-ms",
                        "5",        "--metrics-addr", "[::1]:9000"};
  int code = -1;
  auto parsed = parse_daemon_options(7, const_cast<char**>(argv), code);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->daemon.scheduler.quantum_ns, 5'000'000u);
  EXPECT_EQ(parsed->daemon.run_dir, "/tmp/x");
  EXPECT_EQ(split_host_port(parsed->metrics_addr), std::make_pair(std::string("::1"), 9000));
  const char* bad[] = {"cushared", "--run-dir", "/tmp/x", "--metrics-addr", "nohost"};
  EXPECT_FALSE(parse_daemon_options(5, const_cast<char**>(bad), code).has_value());
  EXPECT_EQ(code, 2);
  EXPECT_THROW(split_host_port("h:99999"), std::runtime_error);
}

}  // namespace
}  // namespace cushare::sched
