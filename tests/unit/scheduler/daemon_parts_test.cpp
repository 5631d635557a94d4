// The daemon's I/O-light pieces: /proc parsing, metrics text, options.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <unistd.h>

#include "scheduler/daemon_options.hpp"
#include "scheduler/host_pids.hpp"
#include "scheduler/metrics.hpp"
#include "scheduler/pod_identity_file.hpp"
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
  t.gpu = "3";
  t.gpu_uuid = "GPU-1";
  t.pod = "trainer-0";
  t.pod_namespace = "ml";
  t.container = "main";
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
  const std::string a_labels =
      "{allocation=\"pod-a\",gpu=\"3\",UUID=\"GPU-1\",pod=\"trainer-0\",namespace=\"ml\","
      "container=\"main\"}";
  EXPECT_NE(text.find("cushare_memory_quota_bytes" + a_labels + " 4096"), std::string::npos);
  EXPECT_EQ(text.find("cushare_memory_quota_bytes{allocation=\"pod-\\\"b\\\""), std::string::npos)
      << "unlimited quota is not exported";
  EXPECT_NE(text.find("cushare_gpu_time_seconds_total{allocation=\"pod-a\""), std::string::npos);
  EXPECT_NE(text.find("} 1.5\n"), std::string::npos);
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
  EXPECT_NE(text.find("cushare_lease_handoffs_total{allocation=\"pod-\\\"b\\\""),
            std::string::npos);
}

TEST(PodIdentityFile, OnlyAFileTheNodeWroteIsBelieved) {
  namespace fs = std::filesystem;
  const fs::path run = fs::temp_directory_path() / ("cushare-identity-" + std::to_string(getpid()));
  fs::remove_all(run);
  fs::create_directories(run / "identity");
  fs::permissions(run / "identity", fs::perms(0755));
  auto write = [&](const std::string& name, const std::string& text, fs::perms mode) {
    std::ofstream(run / "identity" / name) << text;
    fs::permissions(run / "identity" / name, mode);
  };
  const auto good = shm::format_pod_identity({"trainer-0", "ml", "main"});
  write("a1", good, fs::perms(0644));
  EXPECT_EQ(read_pod_identity(run, "a1"), (shm::PodIdentity{"trainer-0", "ml", "main"}));
  write("a2", good, fs::perms(0666));  // writable by others: anyone could have named it
  EXPECT_FALSE(read_pod_identity(run, "a2"));
  fs::create_symlink(run / "identity" / "a1", run / "identity" / "a3");
  EXPECT_FALSE(read_pod_identity(run, "a3"));
  write("a4", "{\"pod\": 1}", fs::perms(0644));
  EXPECT_FALSE(read_pod_identity(run, "a4"));
  EXPECT_FALSE(read_pod_identity(run, "a5"));  // none yet
  fs::permissions(run / "identity", fs::perms(0777));
  EXPECT_FALSE(read_pod_identity(run, "a1"));
  fs::remove_all(run);
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
