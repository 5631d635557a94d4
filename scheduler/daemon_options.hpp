// Command line and config file of cushared. The config file (JSON) sets
// defaults; command-line flags override it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "scheduler/daemon.hpp"

namespace cushare::sched {

struct DaemonOptions {
  DaemonConfig daemon;
  std::string metrics_addr;  // HOST:PORT; empty = no metrics endpoint
  std::string log_level = "info";
  bool check_config = false;  // --check-config: validate, print a summary, exit
  // SCHED_RR priority of the scheduling thread (1-99); 0: normal priority.
  int realtime_priority = 0;
};

// Parses argv (CLI11). Returns the options, or nullopt after printing help
// or the version (`exit_code` 0) or an error on stderr (`exit_code` 2: every
// usage error, bad values and unknown log levels included).
std::optional<DaemonOptions> parse_daemon_options(int argc, char** argv, int& exit_code);

// Applies a JSON config text: {"quantum_ms": 10, "metrics_addr": "127.0.0.1:9410",
// "idle_grace_ms": 2, "drain_bound_ms": 100, "cap_bank_ms": 30, "log_level": "info",
// "over_quota": "kill", "over_quota_grace_ms": 2000, "realtime_priority": 10}.
// Throws std::runtime_error naming the bad key (an unknown log_level included).
void apply_config_json(const std::string& text, DaemonOptions& opts);

// "HOST:PORT" -> (host, port); throws std::runtime_error when malformed.
// An empty host (":9410", as dcgm-exporter and Go servers write it) is
// returned empty and means every interface, IPv4 and IPv6.
std::pair<std::string, int> split_host_port(const std::string& addr);

}  // namespace cushare::sched
