// The opening of every accounted hook: initialise on first use, then either
// account (st is set), forward untouched (disabled / exiting) or fail with
// the initialisation error (bad configuration: fail closed).
#pragma once

#include "shim/process/allocation_state.hpp"

#define CUSHARE_ACCOUNT_OR(forward)                       \
  const ::cushare::shim::AllocationState* st = nullptr;   \
  CUresult init_error = CUDA_SUCCESS;                     \
  switch (::cushare::shim::hook_action(st, init_error)) { \
    case ::cushare::shim::HookAction::kForward:           \
      return forward;                                     \
    case ::cushare::shim::HookAction::kFail:              \
      return init_error;                                  \
    case ::cushare::shim::HookAction::kAccount:           \
      break;                                              \
  }
