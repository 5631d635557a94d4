// The openings every hook uses.
#pragma once

#include "shim/hooks/decls.hpp"
#include "shim/process/allocation_state.hpp"

// The first line of every hook that forwards to the real function of its own
// name: binds `r` to the table holding it (the driver's or NVML's) and, when
// the installed library lacks that function, answers as the library answers
// for a function it does not have (CUDA_ERROR_NOT_FOUND,
// NVML_ERROR_FUNCTION_NOT_FOUND), before the hook does anything else. A
// program built for a newer driver links to the shim's export of a function
// the older driver lacks; without this it would call through a null pointer.
// (`r` is the name the first line declares, never an expression.)
#define CUSHARE_REAL_OR_NOT_FOUND(r, sym)                                        \
  const auto& r = ::cushare::shim::real_table_for(&::sym);                       \
  if (!r.sym) [[unlikely]] /* NOLINT(bugprone-macro-parentheses): r is a name */ \
    return ::cushare::shim::not_found_result(&::sym);

// The opening of every accounted hook: initialise on first use, then either
// account (st is set), forward untouched (disabled / exiting) or fail with
// the initialisation error (bad configuration: fail closed).
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

// The stream a _ptsz/_ptds hook's handle names, as cushare keys streams:
// there the NULL stream is the calling thread's per-thread default stream,
// not the legacy one. Keyed as given, a capture of it went unseen (the
// legacy stream cannot be captured), and with it the graph memory the
// capture allocates. The driver is still called with the handle as given.
[[gnu::always_inline]] inline CUstream per_thread_default(CUstream stream) noexcept {
  return stream ? stream : CU_STREAM_PER_THREAD;
}
