// ctl_write_scenario DIR [--no-daemon-heartbeat] [--live-heartbeat]: writes the
// golden-test node into DIR for the CLI's integration tests. --live-heartbeat
// stamps the daemon heartbeat with the real CLOCK_MONOTONIC plus a minute, so
// that the cusharectl runs of a test see the daemon as up however loaded the
// machine (a heartbeat newer than the reader's clock is fresh: the daemon
// ticks concurrently; a stale one is older than shm::kDaemonHeartbeatStaleNs).
#include <cstring>
#include <iostream>

#include "node/run_dir.hpp"
#include "scenario.hpp"
#include "shm/clock.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: ctl_write_scenario DIR [--no-daemon-heartbeat|--live-heartbeat]\n";
    return 2;
  }
  const bool heartbeat = !(argc > 2 && std::strcmp(argv[2], "--no-daemon-heartbeat") == 0);
  cushare::tools::testing::write_scenario_node(argv[1], heartbeat);
  if (argc > 2 && std::strcmp(argv[2], "--live-heartbeat") == 0) {
    const std::uint64_t now = cushare::shm::monotonic_ns() + 60'000'000'000ull;
    for (const auto& id : cushare::tools::list_allocation_ids(argv[1])) {
      try {
        cushare::tools::LimitsFile f = cushare::tools::open_limits(
            cushare::tools::allocation_dir(argv[1], id) + "/limits", true);
        f.mapping.mutable_region().daemon_heartbeat_ns.store(now);
      } catch (const std::exception&) {  // the future-version allocation stays as it is
      }
    }
  }
  return 0;
}
