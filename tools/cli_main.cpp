// cusharectl: quota inspection and control (docs/cli.md).
// Exit codes: 0 ok, 1 failure, 2 usage. Errors: one line on stderr.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

#include "node/region_reader.hpp"
#include "node/run_dir.hpp"
#include "shm/mapping_guard.hpp"
#include "tools/cli_common.hpp"
#include "tools/command_suggest.hpp"
#include "tools/commands.hpp"
#include "tools/control_client.hpp"
#include "tools/global_options.hpp"

#ifndef CUSHARE_VERSION
#error "CUSHARE_VERSION comes from project(VERSION) in the top-level CMakeLists.txt"
#endif

using namespace cushare::tools;

namespace {

std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n') c = ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// The message for a parse error. CLI11 reports a mistyped command as "A
// subcommand is required" (the word lands among the extras): name the word
// and the nearest command instead.
std::string usage_message(const CLI::App& app, const CLI::ParseError& error) {
  if (!app.get_subcommands().empty()) return one_line(error.what());
  std::string commands;
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
    commands += (commands.empty() ? "" : ", ") + sub->get_name();
  }
  const std::vector<std::string> extras = app.remaining();
  for (const std::string& word : extras) {
    if (word.empty() || word.front() == '-') continue;
    std::string message = "unknown command '" + word + "'";
    if (auto near = suggest_command(word, names)) return message + ": did you mean " + *near + "?";
    message += ": the commands are " + commands;
    return message;
  }
  if (!extras.empty()) return "unknown option '" + extras.front() + "'";
  if (error.get_name() == "RequiredError") return "no command given: use one of " + commands;
  return one_line(error.what());
}

}  // namespace

// An exception the steps below do not handle (building the command line)
// ends the program with a message and exit status 1, not an abort.
int main(int argc, char** argv) try {
  cushare::shm::install_mapping_guard();  // regions a tenant can truncate while we read
  CLI::App app{"cusharectl: inspect and control cushare GPU sharing (quotas, shares, allocations)",
               "cusharectl"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("cusharectl ") + CUSHARE_VERSION);
  GlobalArgs global_args = default_global_args();
  GlobalOptions global;
  add_global_options(app, global_args);

  std::function<int()> action;

  auto* status = app.add_subcommand(
      "status", "per GPU: allocations, memory used/quota, compute, share, throttling");
  status->callback([&] { action = [&] { return run_status(global); }; });

  TopOptions top_options;
  auto* top = app.add_subcommand("top", "status refreshed live with share bars; q or Ctrl-C quits");
  top->add_option("--interval", top_options.interval_s, "seconds between refreshes")
      ->capture_default_str();
  top->add_option("--iterations", top_options.iterations,
                  "stop after N >= 1 frames (default: until q or Ctrl-C)");
  top->callback([&] { action = [&] { return run_top(global, top_options); }; });

  std::string inspect_id;
  auto* inspect = app.add_subcommand(
      "inspect", "one allocation in full: limits, processes, leases, OOM refusals");
  inspect->add_option("ALLOC", inspect_id, "allocation id (as `status` lists it)")->required();
  inspect->callback([&] { action = [&] { return run_inspect(global, inspect_id); }; });

  SetOptions set_options;
  auto* set = app.add_subcommand("set", "change an allocation's limits live (through cushared)");
  set->add_option("ALLOC", set_options.alloc, "allocation id")->required();
  set->add_option("--memory-limit", set_options.memory_limit,
                  "quota: 8Gi, 512Mi, 25% (of the card) or none");
  set->add_option("--compute-limit", set_options.compute_limit,
                  "hard cap in percent of GPU time, 1-100");
  set->add_option("--weight", set_options.weight, "fair-share weight, 1-10000");
  set->add_option("--mode", set_options.mode,
                  "capped (never above the limit) or burst (may use idle time)");
  set->add_option("--gpu", set_options.gpu, "only this GPU entry: UUID, index or *");
  set->add_flag("--no-daemon", set_options.no_daemon,
                "write the limits region directly (needs write access)");
  set->callback([&] { action = [&] { return run_set(global, set_options); }; });

  CreateOptions create_options;
  auto* create =
      app.add_subcommand("create", "make an allocation folder for plain Docker/containerd");
  create->add_option("ALLOC", create_options.alloc, "allocation id: letters, digits, . _ -")
      ->required();
  create
      ->add_option("--memory-limit", create_options.memory_limit, "quota: 8Gi, 512Mi, 25% or none")
      ->required();
  create->add_option("--compute-limit", create_options.compute_limit, "percent 1-100")
      ->capture_default_str();
  create->add_option("--weight", create_options.weight,
                     "fair-share weight (default: the compute limit)");
  create->add_option("--mode", create_options.mode, "capped or burst")->capture_default_str();
  create->add_option("--gpu", create_options.gpus,
                     "GPU UUID or index (repeat for several; default: every GPU)");
  create->add_option("--library", create_options.library, "libcushare.so on this host");
  create
      ->add_option("--preload", create_options.preload,
                   "file (/etc/ld.so.preload mount) or env (LD_PRELOAD)")
      ->capture_default_str();
  create
      ->add_option("--container-run-dir", create_options.container_run_dir,
                   "where the container sees the folder (absolute)")
      ->capture_default_str();
  create->callback([&] { action = [&] { return run_create(global, create_options); }; });

  RemoveOptions remove_options;
  auto* remove =
      app.add_subcommand("remove", "delete an allocation folder (refuses while processes use it)");
  remove->add_option("ALLOC", remove_options.alloc, "allocation id")->required();
  remove->add_flag("--force", remove_options.force, "remove even with live processes");
  remove->callback([&] { action = [&] { return run_remove(global, remove_options); }; });

  DoctorOptions doctor_options;
  auto* doctor = app.add_subcommand("doctor", "check the install; a verdict and a fix per check");
  doctor->add_option("--library", doctor_options.library, "libcushare.so to check");
  doctor->add_option("--ld-so-preload", doctor_options.ld_so_preload, "preload file to check")
      ->capture_default_str();
  doctor->callback([&] { action = [&] { return run_doctor(global, doctor_options); }; });

  for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    add_global_options(*sub, global_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version: printed, exit 0
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "cusharectl: " << usage_message(app, e) << " (see cusharectl --help)\n";
    return kExitUsage;
  }

  try {
    global = resolve_global_options(global_args);
    return action();
  } catch (const CliError& e) {
    std::cerr << "cusharectl: " << one_line(e.what()) << "\n";
    return e.code();
  } catch (const std::exception& e) {
    // NotFoundError, RegionReadError, daemon errors: all runtime failures.
    std::cerr << "cusharectl: " << one_line(e.what()) << "\n";
    return kExitFailure;
  }
} catch (const std::exception& e) {
  std::cerr << "cusharectl: " << one_line(e.what()) << "\n";
  return kExitFailure;
}
