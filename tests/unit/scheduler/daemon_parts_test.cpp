// The daemon's I/O-light pieces: /proc parsing, metrics text, options.
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

TEST(Metrics, RendersPrometheusFamiliesWithLabels) {
  DaemonMetrics m;
  TenantMetrics t;
  t.allocation = "pod-a";
  t.gpu_uuid = "GPU-1";
  t.mode = "capped";
  t.memory_used_bytes = 1024;
  t.memory_quota_bytes = 4096;
  t.gpu_time_ns = 1'500'000'000;
  t.share_target_ppm = 300'000;
  t.share_achieved_ppm = 295'000;
  t.lease_handoffs = 7;
  m.tenants.push_back(t);
  t.allocation = "pod-\"b\"";
  t.memory_quota_bytes = UINT64_MAX;
  m.tenants.push_back(t);
  const std::string text = render_prometheus(m);
  EXPECT_NE(text.find("# TYPE cushare_memory_used_bytes gauge"), std::string::npos);
  EXPECT_NE(
      text.find("cushare_memory_quota_bytes{allocation=\"pod-a\",gpu=\"GPU-1\",gpu_index=\"0\","
                "mode=\"capped\"} 4096"),
      std::string::npos);
  EXPECT_EQ(text.find("cushare_memory_quota_bytes{allocation=\"pod-\\\"b\\\""), std::string::npos)
      << "unlimited quota is not exported";
  EXPECT_NE(text.find("cushare_gpu_time_seconds_total{allocation=\"pod-a\""), std::string::npos);
  EXPECT_NE(text.find("} 1.5\n"), std::string::npos);
  EXPECT_NE(
      text.find("cushare_share_target_ratio{allocation=\"pod-a\",gpu=\"GPU-1\",gpu_index=\"0\","
                "mode=\"capped\"} 0.3"),
      std::string::npos);
  EXPECT_NE(text.find("cushare_lease_handoffs_total{allocation=\"pod-\\\"b\\\""),
            std::string::npos);
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
