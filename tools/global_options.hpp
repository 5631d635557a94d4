// The options every cusharectl command takes: --run-dir, -o/--output and its
// synonym --json. They are accepted before the command and after it
// (`cusharectl status --json`, as kubectl and docker do), so each subcommand
// gets its own copy bound to the same variables.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "tools/commands.hpp"

namespace cushare::tools {

struct GlobalArgs {
  std::string run_dir;         // what was given, or the default
  std::string run_dir_source;  // for errors: "--run-dir", "CUSHARE_RUN_DIR" or "the default"
  std::optional<std::string> output;
  bool json = false;
};

// The defaults: $CUSHARE_RUN_DIR, else /var/run/cushare.
GlobalArgs default_global_args();

void add_global_options(CLI::App& app, GlobalArgs& args);

// Checks and combines what was given; throws CliError (usage) naming the bad
// input: an empty or relative run dir, an unknown output format, --json
// together with another -o.
GlobalOptions resolve_global_options(const GlobalArgs& args);

}  // namespace cushare::tools
