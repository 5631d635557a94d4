// set: live limit changes, through the daemon (or, with --no-daemon, by
// writing the limits region directly under its seqlock).
#include <filesystem>
#include <iostream>

#include "node/gpu_info.hpp"
#include "node/region_reader.hpp"
#include "node/run_dir.hpp"
#include "node/set_request.hpp"
#include "tools/cli_common.hpp"
#include "tools/commands.hpp"
#include "tools/control_client.hpp"

namespace cushare::tools {

namespace {

SetRequest build_request(const SetOptions& o) {
  SetRequest r;
  r.alloc = o.alloc;
  r.gpu = o.gpu;
  try {
    if (o.memory_limit) r.memory_limit = parse_memory_limit_arg(*o.memory_limit);
    if (o.compute_limit) r.compute_limit_pct = parse_compute_limit_arg(*o.compute_limit);
    if (o.weight) r.weight = parse_weight_arg(*o.weight);
    if (o.mode) r.mode = parse_mode_arg(*o.mode);
  } catch (const InvalidRequest& e) {
    throw CliError(kExitUsage, e.what());
  }
  if (r.empty())
    throw CliError(
        kExitUsage,
        "set: nothing to change: give --memory-limit, --compute-limit, --weight or --mode");
  return r;
}

SetOutcome apply_directly(const std::string& run_dir, const SetRequest& request) {
  const RunDirKind kind = detect_run_dir(run_dir);
  std::string folder = run_dir;
  if (kind == RunDirKind::kNode) {
    if (auto error = check_allocation_id(request.alloc)) throw CliError(kExitFailure, *error);
    folder = allocation_dir(run_dir, request.alloc);
    if (!std::filesystem::is_directory(folder))
      throw CliError(kExitFailure, "no allocation '" + request.alloc + "' in " + run_dir +
                                       ": see `cusharectl status`");
  }
  LimitsFile limits = open_limits(folder + "/" + kLimitsName, /*writable=*/true);
  std::optional<UsageFile> usage;
  if (std::filesystem::exists(folder + "/" + kUsageName))
    usage = open_usage(folder + "/" + kUsageName);
  return apply_set(limits.mapping.mutable_region(), usage ? usage->region() : nullptr, request,
                   query_gpus_nvml());
}

}  // namespace

int run_set(const GlobalOptions& global, const SetOptions& options) {
  const SetRequest request = build_request(options);
  SetOutcome outcome;
  if (options.no_daemon) {
    try {
      outcome = apply_directly(global.run_dir, request);
    } catch (const InvalidRequest& e) {
      throw CliError(kExitUsage, e.what());
    }
  } else {
    if (detect_run_dir(global.run_dir) == RunDirKind::kAllocation)
      throw CliError(
          kExitFailure,
          global.run_dir +
              " is one allocation's folder (no daemon there): pass --no-daemon to write its "
              "limits directly (needs write access)");
    try {
      outcome = set_outcome_from_json(
          control_call(socket_path(global.run_dir), {{"cmd", "set"}, {"set", to_json(request)}}));
    } catch (const DaemonUnavailable& e) {
      throw CliError(kExitFailure, std::string(e.what()) +
                                       ", or pass --no-daemon to write the limits file directly");
    } catch (const ControlRequestFailed& e) {
      throw CliError(e.code() == "bad_request" ? kExitUsage : kExitFailure, e.what());
    }
  }
  if (global.json()) {
    std::cout << to_json(outcome).dump(2) << "\n";
  } else {
    for (const auto& change : outcome.entries)
      std::cout << request.alloc << " " << describe(change) << "\n";
  }
  for (const auto& w : outcome.warnings) std::cerr << "cusharectl: warning: " << w << "\n";
  return kExitOk;
}

}  // namespace cushare::tools
