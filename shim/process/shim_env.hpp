// The shim's own environment variables (the quota variables are parsed by
// shm/quota_spec). Pure: the environment comes through an injected lookup.
//   CUSHARE_DISABLE        1/true/yes = pure pass-through; 0/false/no/unset = enforce
//   CUSHARE_RUN_DIR        allocation folder holding `limits` and `usage`
//   CUSHARE_OOM_BACKTRACE  1 = add the call site to the OOM log line
// The first two configure standalone allocations only: a managed one
// (managed_allocation.hpp) ignores them.
#pragma once

#include <string>

#include "shm/parsed.hpp"
#include "shm/quota_spec.hpp"

namespace cushare::shim {

struct ShimEnv {
  bool disabled = false;
  bool oom_backtrace = false;
  std::string run_dir;
};

// `var_run_exists`: whether shm::kDefaultNodeRunDir (/var/run/cushare) is a
// directory (the default run dir when CUSHARE_RUN_DIR is unset); otherwise
// /tmp/cushare-<uid>.
shm::Parsed<ShimEnv> shim_env_from(const shm::EnvLookup& env, unsigned uid, bool var_run_exists);

}  // namespace cushare::shim

namespace cushare::shim {
// CUSHARE_DISABLE read straight from the process environment (cached), for
// the resolver hooks that run before cuInit. Malformed values count as "not
// disabled" here; cuInit then reports them and fails.
bool disabled_by_env() noexcept;
}  // namespace cushare::shim
