// The cusharectl subcommands. Each returns the process exit code or throws
// CliError; main() registers them with CLI11 (tools/cli_main.cpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "tools/output_format.hpp"

namespace cushare::tools {

struct GlobalOptions {
  std::string run_dir;  // --run-dir, default CUSHARE_RUN_DIR or /var/run/cushare; absolute
  OutputFormat output = OutputFormat::kTable;  // -o / --output (--json = -o json)

  bool json() const { return output == OutputFormat::kJson; }
  std::size_t width() const { return table_width(output); }
};

int run_status(const GlobalOptions& global);
int run_inspect(const GlobalOptions& global, const std::string& alloc);

struct TopOptions {
  double interval_s = 1.0;
  std::optional<unsigned> iterations;  // unset = until q / Ctrl-C; 0 is refused
};
int run_top(const GlobalOptions& global, const TopOptions& options);

struct SetOptions {
  std::string alloc;
  std::optional<std::string> gpu, memory_limit, compute_limit, weight, mode;
  bool no_daemon = false;
};
int run_set(const GlobalOptions& global, const SetOptions& options);

struct CreateOptions {
  std::string alloc;
  std::string memory_limit;
  std::string compute_limit = "100";
  std::optional<std::string> weight;
  std::string mode = "burst";
  std::vector<std::string> gpus;  // UUIDs or NVML indexes; empty = "*" (every GPU)
  std::optional<std::string> library;
  std::string preload = "file";  // file | env
  std::string container_run_dir = "/var/run/cushare";
};
int run_create(const GlobalOptions& global, const CreateOptions& options);

struct RemoveOptions {
  std::string alloc;
  bool force = false;
};
int run_remove(const GlobalOptions& global, const RemoveOptions& options);

struct DoctorOptions {
  std::optional<std::string> library;
  std::string ld_so_preload = "/etc/ld.so.preload";
};
int run_doctor(const GlobalOptions& global, const DoctorOptions& options);

}  // namespace cushare::tools
