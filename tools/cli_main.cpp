// cusharectl: quota inspection and control (docs/cli.md).
// Exit codes: 0 ok, 1 failure, 2 usage. Errors: one line on stderr.
#include <CLI/CLI.hpp>

#include <iostream>

#include "shm/mapping_guard.hpp"
#include "tools/cli_common.hpp"
#include "tools/commands.hpp"
#include "tools/control_client.hpp"
#include "tools/region_reader.hpp"
#include "tools/run_dir.hpp"

using namespace cushare::tools;

namespace {

std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n') c = ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  cushare::shm::install_mapping_guard();  // regions a tenant can truncate while we read
  CLI::App app{"cusharectl: inspect and control cushare GPU sharing (quotas, shares, allocations)",
               "cusharectl"};
  app.require_subcommand(1);
  GlobalOptions global;
  global.run_dir = default_run_dir();
  app.add_option("--run-dir", global.run_dir,
                 "node run dir (allocations in DIR/alloc/) or one allocation's folder; default "
                 "$CUSHARE_RUN_DIR or "
                 "/var/run/cushare")
      ->capture_default_str();
  app.add_flag("--json", global.json, "print JSON (bytes and nanoseconds) instead of tables");

  std::function<int()> action;

  auto* status = app.add_subcommand(
      "status", "per GPU: allocations, memory used/quota, compute, share, throttling");
  status->callback([&] { action = [&] { return run_status(global); }; });

  TopOptions top_options;
  auto* top = app.add_subcommand("top", "status refreshed live with share bars; q or Ctrl-C quits");
  top->add_option("--interval", top_options.interval_s, "seconds between refreshes")
      ->capture_default_str();
  top->add_option("--iterations", top_options.iterations, "stop after N frames (0 = until q)")
      ->capture_default_str();
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
                     "GPU UUID (repeat for several; default: every GPU)");
  create->add_option("--library", create_options.library, "libcushare.so on this host");
  create
      ->add_option("--preload", create_options.preload,
                   "file (/etc/ld.so.preload mount) or env (LD_PRELOAD)")
      ->capture_default_str();
  create
      ->add_option("--container-run-dir", create_options.container_run_dir,
                   "where the container sees the folder")
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "cusharectl: " << one_line(e.what()) << " (see cusharectl --help)\n";
    return kExitUsage;
  }

  try {
    return action();
  } catch (const CliError& e) {
    std::cerr << "cusharectl: " << one_line(e.what()) << "\n";
    return e.code();
  } catch (const std::exception& e) {
    // NotFoundError, RegionReadError, daemon errors: all runtime failures.
    std::cerr << "cusharectl: " << one_line(e.what()) << "\n";
    return kExitFailure;
  }
}
