#include "tools/global_options.hpp"

#include <cstdlib>

#include "node/run_dir.hpp"
#include "tools/cli_common.hpp"
#include "tools/path_args.hpp"

namespace cushare::tools {

GlobalArgs default_global_args() {
  GlobalArgs args;
  args.run_dir = default_run_dir();
  const char* env = std::getenv("CUSHARE_RUN_DIR");
  args.run_dir_source = env != nullptr && *env != '\0' ? "CUSHARE_RUN_DIR" : "the default run dir";
  return args;
}

void add_global_options(CLI::App& app, GlobalArgs& args) {
  app.add_option_function<std::string>(
      "--run-dir",
      [&args](const std::string& dir) {
        args.run_dir = dir;
        args.run_dir_source = "--run-dir";
      },
      "node run dir (allocations in DIR/alloc/) or one allocation's folder, absolute; default "
      "$CUSHARE_RUN_DIR or " +
          std::string(kDefaultRunDir));
  app.add_option("-o,--output", args.output,
                 "table (fits 80 columns), wide (nothing cut) or json (bytes and nanoseconds)");
  app.add_flag("--json", args.json, "the same as -o json");
}

GlobalOptions resolve_global_options(const GlobalArgs& args) {
  GlobalOptions global;
  if (auto error = check_absolute_dir(args.run_dir, args.run_dir_source))
    throw CliError(kExitUsage, *error);
  global.run_dir = args.run_dir;
  if (args.output) {
    const auto format = parse_output_format(*args.output);
    if (!format)
      throw CliError(kExitUsage,
                     "-o '" + *args.output + "' is not an output format: use table, wide or json");
    if (args.json && *format != OutputFormat::kJson)
      throw CliError(kExitUsage, "--json and -o " + *args.output + " contradict: give one of them");
    global.output = *format;
  } else if (args.json) {
    global.output = OutputFormat::kJson;
  }
  return global;
}

}  // namespace cushare::tools
