#include "scheduler/daemon_options.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <sstream>

#ifndef CUSHARE_VERSION
#error "CUSHARE_VERSION comes from project(VERSION) in the top-level CMakeLists.txt"
#endif

namespace cushare::sched {
namespace {

// spdlog's from_str maps every unknown name to "off": a typo would silence
// the daemon. Only the names below are levels.
constexpr const char* kLogLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};

std::string checked_log_level(const std::string& level, const std::string& what) {
  for (const char* known : kLogLevels)
    if (level == known) return level;
  throw std::runtime_error(what + " '" + level +
                           "' is not a log level: use trace, debug, info, warn, error, critical "
                           "or off");
}

std::uint64_t ms_to_ns(double ms, const char* what) {
  if (!(ms > 0) || ms > 60'000) {
    throw std::runtime_error(std::string(what) + " must be > 0 and <= 60000 ms, got " +
                             std::to_string(ms));
  }
  return static_cast<std::uint64_t>(ms * 1e6);
}

OverQuotaAction over_quota_action(const std::string& text, const char* what) {
  if (auto a = parse_over_quota_action(text)) return *a;
  throw std::runtime_error(std::string(what) + " must be kill or log, got '" + text + "'");
}

}  // namespace

void apply_config_json(const std::string& text, DaemonOptions& opts) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("config is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw std::runtime_error("config must be a JSON object");
  auto& sc = opts.daemon.scheduler;
  for (const auto& [key, value] : j.items()) {
    // Named captures: clang before 16 (clang-tidy) cannot capture a
    // structured binding.
    auto number = [&key = key, &value = value]() {
      if (!value.is_number()) throw std::runtime_error("config key '" + key + "' must be a number");
      return value.get<double>();
    };
    if (key == "quantum_ms") {
      sc.quantum_ns = ms_to_ns(number(), "quantum_ms");
    } else if (key == "idle_grace_ms") {
      sc.idle_grace_ns = ms_to_ns(number(), "idle_grace_ms");
    } else if (key == "drain_bound_ms") {
      sc.drain_bound_ns = ms_to_ns(number(), "drain_bound_ms");
    } else if (key == "cap_bank_ms") {
      sc.cap_bank_ns = ms_to_ns(number(), "cap_bank_ms");
    } else if (key == "lease_per_handoff") {
      if (!value.is_number_integer() || value.get<long long>() < 1 || value.get<long long>() > 1000)
        throw std::runtime_error("config key 'lease_per_handoff' must be an integer 1-1000");
      sc.lease_per_handoff = value.get<std::uint64_t>();
    } else if (key == "over_quota_grace_ms") {
      opts.daemon.over_quota_grace_ns = ms_to_ns(number(), "over_quota_grace_ms");
    } else if (key == "realtime_priority") {
      if (!value.is_number_integer() || value.get<int>() < 0 || value.get<int>() > 99)
        throw std::runtime_error("config key 'realtime_priority' must be an integer 0-99");
      opts.realtime_priority = value.get<int>();
    } else if (key == "over_quota") {
      if (!value.is_string()) throw std::runtime_error("config key 'over_quota' must be a string");
      opts.daemon.over_quota = over_quota_action(value.get<std::string>(), "over_quota");
    } else if (key == "metrics_addr" || key == "log_level" || key == "run_dir") {
      if (!value.is_string()) throw std::runtime_error("config key '" + key + "' must be a string");
      if (key == "metrics_addr") opts.metrics_addr = value.get<std::string>();
      if (key == "log_level")
        opts.log_level = checked_log_level(value.get<std::string>(), "config key 'log_level'");
      if (key == "run_dir") opts.daemon.run_dir = value.get<std::string>();
    } else {
      throw std::runtime_error("unknown config key '" + key + "'");
    }
  }
}

std::pair<std::string, int> split_host_port(const std::string& addr) {
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon + 1 == addr.size()) {
    throw std::runtime_error("metrics address must be HOST:PORT or :PORT, got '" + addr + "'");
  }
  std::string host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    std::size_t used = 0;
    port = std::stoi(addr.substr(colon + 1), &used);
    if (used != addr.size() - colon - 1) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw std::runtime_error("metrics address must be HOST:PORT or :PORT, got '" + addr + "'");
  }
  if (port < 0 || port > 65535)
    throw std::runtime_error("metrics port out of range in '" + addr + "'");
  return {host, port};
}

std::optional<DaemonOptions> parse_daemon_options(int argc, char** argv, int& exit_code) {
  DaemonOptions opts;
  CLI::App app{"cushared: the cushare node daemon (GPU time leases, reclaim, metrics)", "cushared"};
  app.set_version_flag("--version", std::string("cushared ") + CUSHARE_VERSION);
  std::string run_dir;
  std::optional<double> quantum_ms;
  std::string metrics_addr;
  std::string config_file;
  std::string log_level;
  app.add_option("--run-dir", run_dir,
                 "Folder holding alloc/<id>/{limits,usage} (required here or as run_dir in "
                 "--config)");
  app.add_option("--quantum-ms", quantum_ms, "Lease quantum in milliseconds (default 10)");
  app.add_option("--metrics-addr", metrics_addr,
                 "Serve Prometheus metrics on HOST:PORT (:PORT: every interface)");
  app.add_option("--config", config_file, "JSON config file (flags override it)");
  app.add_flag("--check-config", opts.check_config,
               "validate the configuration and flags, print a one-line summary and exit");
  app.add_option("--log-level", log_level,
                 "trace, debug, info (default), warn, error, critical, off");
  std::string over_quota;
  std::optional<double> over_quota_grace_ms;
  app.add_option("--over-quota", over_quota,
                 "kill (default) or log: what happens to an allocation that ground truth (NVML) "
                 "shows above its memory quota past the grace, or running kernels without leases");
  app.add_option("--over-quota-grace-ms", over_quota_grace_ms,
                 "how long ground truth may show an allocation above its memory quota (default "
                 "2000)");
  std::optional<int> realtime_priority;
  app.add_option("--realtime-priority", realtime_priority,
                 "run the scheduling thread with SCHED_RR at this priority (1-99; 0, the "
                 "default: normal priority); lease hand-offs wait for its wake-ups")
      ->check(CLI::Range(0, 99));
  try {
    app.parse(argc, argv);
    if (!config_file.empty()) {
      std::ifstream in(config_file);
      if (!in) throw std::runtime_error("cannot read config file " + config_file);
      std::stringstream text;
      text << in.rdbuf();
      apply_config_json(text.str(), opts);
    }
    if (!run_dir.empty()) opts.daemon.run_dir = run_dir;
    if (opts.daemon.run_dir.empty())
      throw std::runtime_error("--run-dir is required (or run_dir in the --config file)");
    if (quantum_ms) opts.daemon.scheduler.quantum_ns = ms_to_ns(*quantum_ms, "--quantum-ms");
    if (!metrics_addr.empty()) opts.metrics_addr = metrics_addr;
    if (realtime_priority) opts.realtime_priority = *realtime_priority;
    if (!log_level.empty()) opts.log_level = checked_log_level(log_level, "--log-level");
    if (!over_quota.empty()) opts.daemon.over_quota = over_quota_action(over_quota, "--over-quota");
    if (over_quota_grace_ms)
      opts.daemon.over_quota_grace_ns = ms_to_ns(*over_quota_grace_ms, "--over-quota-grace-ms");
    if (!opts.metrics_addr.empty()) split_host_port(opts.metrics_addr);
    auto& sc = opts.daemon.scheduler;
    sc.extend_margin_ns = std::min(sc.extend_margin_ns, sc.quantum_ns / 2);
    sc.idle_grace_ns =
        std::min(sc.idle_grace_ns, std::max<std::uint64_t>(sc.quantum_ns / 4, 500'000));
  } catch (const CLI::Success& e) {  // --help, --help-all, --version: printed, exit 0
    exit_code = app.exit(e);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    // CLI11's own codes (105, 106, 109, ...) mean nothing to systemd or a
    // script: every usage error is 2, as for cusharectl.
    std::cerr << "cushared: " << e.what() << " (see cushared --help)\n";
    exit_code = 2;
    return std::nullopt;
  } catch (const std::exception& e) {
    std::cerr << "cushared: " << e.what() << "\n";
    exit_code = 2;
    return std::nullopt;
  }
  return opts;
}

}  // namespace cushare::sched
