#include "shim/process/shim_env.hpp"

#include <cstdlib>

#include <optional>
#include <string_view>
#include "shim/accounting/managed_allocation.hpp"
#include "shm/run_dir_layout.hpp"

namespace cushare::shim {
namespace {

// nullopt = malformed.
std::optional<bool> parse_flag(std::string_view v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return std::nullopt;
}

}  // namespace

shm::Parsed<ShimEnv> shim_env_from(const shm::EnvLookup& env, unsigned uid, bool var_run_exists) {
  ShimEnv out;
  for (const char* name : {"CUSHARE_DISABLE", "CUSHARE_OOM_BACKTRACE"}) {
    const char* v = env(name);
    if (!v) continue;
    auto flag = parse_flag(v);
    if (!flag) {
      return shm::Parsed<ShimEnv>::fail(std::string(name) + "='" + v +
                                        "': expected 1/true/yes/on or 0/false/no/off");
    }
    (std::string_view(name) == "CUSHARE_DISABLE" ? out.disabled : out.oom_backtrace) = *flag;
  }
  if (const char* dir = env("CUSHARE_RUN_DIR")) {
    if (*dir != '/') {
      return shm::Parsed<ShimEnv>::fail(std::string("CUSHARE_RUN_DIR='") + dir +
                                        "': expected an absolute path");
    }
    out.run_dir = dir;
  } else {
    out.run_dir = var_run_exists ? shm::kDefaultNodeRunDir : "/tmp/cushare-" + std::to_string(uid);
  }
  return shm::Parsed<ShimEnv>::ok(std::move(out));
}

}  // namespace cushare::shim

namespace cushare::shim {
bool disabled_by_env() noexcept {
  static const bool disabled = [] {
    const char* v = std::getenv("CUSHARE_DISABLE");
    // Only a standalone allocation can be disabled (managed_allocation.hpp).
    return v && parse_flag(v).value_or(false) && !managed_allocation();
  }();
  return disabled;
}
}  // namespace cushare::shim
