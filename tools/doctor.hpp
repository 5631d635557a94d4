// `cusharectl doctor`: independent install checks, each with a verdict and,
// when not ok, the fix. Checks that load code (the shim, the driver) run in a
// forked child so a crash or hang there cannot take cusharectl down.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cushare::tools {

enum class Verdict { kOk, kWarn, kFail };

struct Check {
  std::string name;
  Verdict verdict = Verdict::kOk;
  std::string detail;
  std::string fix;  // empty when ok
};

struct DoctorInputs {
  std::string run_dir;
  std::string library;        // libcushare.so to try
  std::string ld_so_preload;  // normally /etc/ld.so.preload
};

Check check_library(const std::string& library);
Check check_ld_so_preload(const std::string& path, bool inside_container);
Check check_driver();
Check check_daemon(const std::string& run_dir, bool inside_container);
Check check_regions(const std::string& run_dir);
Check check_permissions(const std::string& run_dir, bool inside_container);

std::vector<Check> run_checks(const DoctorInputs& inputs);

std::string render_checks(const std::vector<Check>& checks);
nlohmann::json to_json(const std::vector<Check>& checks);
bool all_passed(const std::vector<Check>& checks);  // no kFail

}  // namespace cushare::tools
