// status and inspect: one snapshot, as a table or as JSON.
#include <iostream>

#include "node/status_json.hpp"
#include "tools/cli_common.hpp"
#include "tools/commands.hpp"
#include "tools/status_render.hpp"

namespace cushare::tools {

int run_status(const GlobalOptions& global) {
  std::string note;
  const Status status = fetch_status(global.run_dir, &note);
  if (!note.empty()) std::cerr << "cusharectl: warning: " << note << "\n";
  if (global.json())
    std::cout << to_json(status).dump(2) << "\n";
  else
    std::cout << render_status(status, global.width());
  // Unreadable allocations were shown; they still make the run a failure.
  if (!status.problems.empty()) {
    std::cerr << "cusharectl: " << status.problems.size()
              << " allocation(s) could not be read: " << status.problems.front().error << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

int run_inspect(const GlobalOptions& global, const std::string& alloc) {
  std::string note;
  const AllocationView view = fetch_allocation(global.run_dir, alloc, &note);
  if (!note.empty()) std::cerr << "cusharectl: warning: " << note << "\n";
  if (global.json())
    std::cout << to_json(view.allocation).dump(2) << "\n";
  else
    std::cout << render_allocation(view.allocation, view.gpus, view.daemon, global.width());
  return kExitOk;
}

}  // namespace cushare::tools
