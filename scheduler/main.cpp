// cushared: the node daemon. See docs/scheduler.md.
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>
#include <memory>

#include "scheduler/control_handler.hpp"
#include "scheduler/control_server.hpp"
#include "scheduler/daemon.hpp"
#include "scheduler/daemon_options.hpp"
#include "scheduler/metrics.hpp"
#include "scheduler/metrics_server.hpp"
#include "scheduler/run_dir_lock.hpp"
#include "shm/clock.hpp"
#include "shm/mapping_guard.hpp"
#include "shm/run_dir_layout.hpp"

namespace {
std::atomic<bool> g_stop{false};
// A loop that has not ticked for this long is stuck (/healthz answers 503).
constexpr std::uint64_t kHealthyTickAgeNs = 5'000'000'000;
void on_signal(int) {
  g_stop.store(true);
}
}  // namespace

int main(int argc, char** argv) {
  using namespace cushare::sched;
  // Tenants can truncate their region files under the daemon's mappings.
  cushare::shm::install_mapping_guard();
  int exit_code = 0;
  auto opts = parse_daemon_options(argc, argv, exit_code);
  if (!opts) return exit_code;
  if (opts->check_config) {
    const auto& sc = opts->daemon.scheduler;
    fmt::print(
        "configuration OK: run dir {}, quantum {} ms, metrics {}, log level {}, real-time "
        "priority {}\n",
        opts->daemon.run_dir.string(), sc.quantum_ns / 1e6,
        opts->metrics_addr.empty() ? "off" : opts->metrics_addr, opts->log_level,
        opts->realtime_priority > 0 ? std::to_string(opts->realtime_priority) : "off");
    return 0;
  }
  spdlog::set_level(spdlog::level::from_str(opts->log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ cushared: %v");

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Before anything touches the regions: a second daemon must not write one
  // heartbeat or lease.
  std::unique_ptr<RunDirLock> run_dir_lock;
  std::unique_ptr<Daemon> daemon;
  try {
    run_dir_lock = std::make_unique<RunDirLock>(opts->daemon.run_dir);
    daemon = std::make_unique<Daemon>(opts->daemon);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }

  std::unique_ptr<MetricsServer> metrics_server;
  if (!opts->metrics_addr.empty()) {
    const auto [host, port] = split_host_port(opts->metrics_addr);
    // Healthy: the main loop ticked within the last few seconds (it ticks at
    // least every idle poll interval) and no shutdown has begun.
    auto healthy = [&daemon] {
      const std::uint64_t last = daemon->last_tick_ns();
      const std::uint64_t now = cushare::shm::monotonic_ns();
      return !g_stop.load() && (last == 0 || now < last || now - last < kHealthyTickAgeNs);
    };
    auto metrics = [&daemon] { return render_prometheus(*daemon->metrics()); };
    try {
      metrics_server = std::make_unique<MetricsServer>(
          host, port, MetricsEndpoints{.metrics = metrics, .healthy = healthy});
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      return 1;
    }
    spdlog::info("metrics on http://{}/metrics", metrics_server->address());
  }

  // cusharectl's control socket (<run-dir>/cushared.sock); the daemon runs
  // without it if it cannot be made (cusharectl then reads the regions).
  std::unique_ptr<RunDirControlHandler> control_handler;
  std::unique_ptr<ControlServer> control_server;
  try {
    control_handler = std::make_unique<RunDirControlHandler>(ControlHandlerConfig{
        .run_dir = opts->daemon.run_dir, .quantum_ns = opts->daemon.scheduler.quantum_ns});
    control_server = std::make_unique<ControlServer>(
        opts->daemon.run_dir / cushare::shm::kSocketName, *control_handler);
    spdlog::info("control socket {}", control_server->socket_path().string());
  } catch (const std::exception& e) {
    spdlog::warn("no control socket: {}", e.what());
  }

  if (opts->realtime_priority > 0) {
    // Only this thread (the scheduler's): the metrics and control threads,
    // which answer whoever connects, stay at normal priority.
    sched_param param{.sched_priority = opts->realtime_priority};
    if (const int err = pthread_setschedparam(pthread_self(), SCHED_RR, &param); err != 0) {
      spdlog::warn(
          "cannot run at real-time priority {} ({}): lease hand-offs then wait for "
          "the CPU like any process",
          opts->realtime_priority, std::strerror(err));
    } else {
      spdlog::info("scheduling thread at SCHED_RR priority {}", opts->realtime_priority);
    }
  }
  daemon->run(g_stop);

  if (control_server) control_server->stop();

  if (metrics_server) metrics_server->stop();
  spdlog::info("stopped");
  return 0;
}
