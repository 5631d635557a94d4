#include "tools/cli_common.hpp"

#include <filesystem>

#include "node/gone_processes.hpp"
#include "node/gpu_info.hpp"
#include "node/run_dir.hpp"
#include "node/status_json.hpp"
#include "tools/control_client.hpp"

namespace cushare::tools {

namespace {

// True when a daemon socket is there to ask. A missing socket is the normal
// "no daemon" case (laptop, plain Docker) and is not worth a note.
bool daemon_socket_present(const std::string& run_dir) {
  std::error_code ec;
  return std::filesystem::exists(socket_path(run_dir), ec);
}

}  // namespace

Status fetch_status(const std::string& run_dir, std::string* note) {
  const RunDirKind kind = detect_run_dir(run_dir);
  if (kind == RunDirKind::kNode && daemon_socket_present(run_dir)) {
    try {
      return status_from_json(control_call(socket_path(run_dir), {{"cmd", "status"}}));
    } catch (const DaemonUnavailable&) {
      // Stale socket of a stopped daemon: the regions say everything but live shares.
    } catch (const std::exception& e) {
      if (note)
        *note = std::string("the daemon's answer was unusable (") + e.what() +
                "); read the regions directly";
    }
  }
  // Without a daemon nobody else may have looked since a process ended: its
  // charge would still show (docs/cusharectl.md, "Without a daemon").
  reclaim_gone_processes_in(run_dir);
  return read_status_from_regions(run_dir, query_gpus_nvml(), read_clocks());
}

AllocationView fetch_allocation(const std::string& run_dir, const std::string& id,
                                std::string* note) {
  const RunDirKind kind = detect_run_dir(run_dir);
  if (kind == RunDirKind::kNode && daemon_socket_present(run_dir)) {
    try {
      const nlohmann::json result =
          control_call(socket_path(run_dir), {{"cmd", "inspect"}, {"alloc", id}});
      AllocationView view{allocation_from_json(result.at("allocation")), {}, {}};
      for (const auto& g : result.at("gpus")) view.gpus.push_back(gpu_info_from_json(g));
      view.daemon.up = true;
      return view;
    } catch (const ControlRequestFailed& e) {
      throw CliError(kExitFailure, e.what());
    } catch (const DaemonUnavailable&) {
    } catch (const std::exception& e) {
      if (note)
        *note = std::string("the daemon's answer was unusable (") + e.what() +
                "); read the regions directly";
    }
  }
  reclaim_gone_processes_in(run_dir);
  const Now now = read_clocks();
  AllocationView view{read_allocation(run_dir, id, now), query_gpus_nvml(), {}};
  // The daemon's state as this allocation's heartbeat shows it.
  AllocationFiles files = open_allocation(view.allocation.path);
  view.daemon = daemon_from_regions({files.views()}, now);
  return view;
}

}  // namespace cushare::tools
