#include <iostream>

#include "tools/cli_common.hpp"
#include "tools/commands.hpp"
#include "tools/doctor.hpp"
#include "tools/install_paths.hpp"

namespace cushare::tools {

int run_doctor(const GlobalOptions& global, const DoctorOptions& options) {
  const std::vector<Check> checks = run_checks(
      DoctorInputs{global.run_dir, library_path(options.library), options.ld_so_preload});
  if (global.json())
    std::cout << to_json(checks).dump(2) << "\n";
  else
    std::cout << render_checks(checks);
  return all_passed(checks) ? kExitOk : kExitFailure;
}

}  // namespace cushare::tools
