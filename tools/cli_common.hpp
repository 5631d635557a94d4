// Pieces every cusharectl command shares: the error type that carries an
// exit code, and fetching the status from the daemon or the regions.
#pragma once

#include <stdexcept>
#include <string>

#include "node/status_model.hpp"

namespace cushare::tools {

enum ExitCode : int { kExitOk = 0, kExitFailure = 1, kExitUsage = 2 };

// Ends the command: main prints "cusharectl: <what>" on one line and exits with `code`.
class CliError : public std::runtime_error {
 public:
  CliError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// The status of `run_dir`: asked of the daemon over its socket when this is
// a node run dir with a live daemon, else read from the regions (read-only).
// `note` receives a line to print on stderr when the daemon failed
// unexpectedly and the regions were used instead.
Status fetch_status(const std::string& run_dir, std::string* note = nullptr);

// One allocation and the GPUs, by the same rule.
struct AllocationView {
  Allocation allocation;
  std::vector<GpuInfo> gpus;
  DaemonState daemon;
};
AllocationView fetch_allocation(const std::string& run_dir, const std::string& id,
                                std::string* note = nullptr);

}  // namespace cushare::tools
