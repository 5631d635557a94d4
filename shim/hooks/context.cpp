// cuInit (where the shim initialises: after the real cuInit succeeded, never
// before, and never calling cuInit itself) and the context lifecycle hooks
// that charge context overhead (and return the charges of the modules a
// destroyed context takes with it).
#include <array>
#include <mutex>

#include "shim/accounting/context_overhead.hpp"
#include "shim/accounting/memory_accounting.hpp"
#include "shim/accounting/memory_quiescence.hpp"
#include "shim/accounting/module_accounting.hpp"
#include "shim/gate/tracker.hpp"
#include "shim/hooks/decls.hpp"
#include "shim/hooks/support.hpp"

using namespace cushare::shim;

extern "C" CUresult cuInit(unsigned int Flags) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuInit)
  const CUresult rc = r.cuInit(Flags);
  if (rc != CUDA_SUCCESS) return rc;
  return ensure_initialized();
}

namespace {

// Reserve the context's expected overhead, create, settle on what it took.
template <class Call>
CUresult measured_create(const AllocationState& st, CUcontext* pctx, CUdevice dev, Call&& call) {
  std::lock_guard serial(measurement_mutex());
  const MemoryOp op(&st);  // the reservation, to the daemon
  ContextReservation reservation(st, dev);
  if (!reservation.ok()) return CUDA_ERROR_OUT_OF_MEMORY;
  const QuietWindow window(st);
  const MemorySample before = sample_memory(st, dev);
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS || !pctx) return rc;  // the reservation goes back
  const MemorySample after = sample_memory(st, dev);
  reservation.created(*pctx, before, after, window.quiet());
  return rc;
}

// The context's charge and those of its modules return with it. A memory
// call: the device memory goes before the charges do.
template <class Call>
CUresult destroy(CUcontext ctx, Call&& call) {
  const ContextModules modules = modules_of_context(ctx, -1);
  const AllocationState* st = allocation_state();
  const MemoryOp op(st);
  CUresult rc;
  {
    gate::ContextEnding ending(ctx);
    rc = call();
    if (rc == CUDA_SUCCESS) ending.ended();
  }
  if (st && rc == CUDA_SUCCESS) {
    modules_destroyed(*st, modules);
    context_destroyed(*st, ctx, -1);
    release_destroyed_allocations(*st);  // the allocations the driver freed with it
  }
  return rc;
}

}  // namespace

extern "C" CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuCtxCreate)
  CUSHARE_ACCOUNT_OR(r.cuCtxCreate(pctx, flags, dev))
  return measured_create(*st, pctx, dev, [&] { return r.cuCtxCreate(pctx, flags, dev); });
}

extern "C" CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuCtxCreate_v2)
  CUSHARE_ACCOUNT_OR(r.cuCtxCreate_v2(pctx, flags, dev))
  return measured_create(*st, pctx, dev, [&] { return r.cuCtxCreate_v2(pctx, flags, dev); });
}

extern "C" CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                   unsigned int flags, CUdevice dev) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuCtxCreate_v3)
  CUSHARE_ACCOUNT_OR(r.cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev))
  return measured_create(
      *st, pctx, dev, [&] { return r.cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev); });
}

extern "C" CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams,
                                   unsigned int flags, CUdevice dev) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuCtxCreate_v4)
  CUSHARE_ACCOUNT_OR(r.cuCtxCreate_v4(pctx, ctxCreateParams, flags, dev))
  return measured_create(*st, pctx, dev,
                         [&] { return r.cuCtxCreate_v4(pctx, ctxCreateParams, flags, dev); });
}

extern "C" CUresult cuCtxDestroy_v2(CUcontext ctx) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuCtxDestroy_v2)
  return destroy(ctx, [&] { return r.cuCtxDestroy_v2(ctx); });
}

extern "C" CUresult cuCtxDestroy(CUcontext ctx) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuCtxDestroy)
  return destroy(ctx, [&] { return r.cuCtxDestroy(ctx); });
}

namespace {

// Held by a release of a primary context through its look at the state
// after the call, and by the shim's retains: a retain in between would make
// the context active again and hide that the release ended it (and the gate
// would go on naming the handles that died with it).
std::mutex& primary_lifecycle_mutex(CUdevice dev) {
  static std::array<std::mutex, 64> mutexes;
  return mutexes[static_cast<unsigned>(dev) % mutexes.size()];
}

bool primary_active(CUdevice dev) {
  unsigned int flags = 0;
  int active = 0;
  const RealDriver& r = real();
  return r.cuDevicePrimaryCtxGetState &&
         r.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active;
}

// The handle of the primary context of `dev` while it is active, else null.
// A retain and a release of the driver's own: the count is as it was, and
// reaches zero in between only if other threads release references the
// caller does not hold.
CUcontext active_primary(CUdevice dev) {
  const RealDriver& r = real();
  CUcontext ctx = nullptr;
  if (!primary_active(dev) || !r.cuDevicePrimaryCtxRetain ||
      r.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
    return nullptr;
  if (r.cuDevicePrimaryCtxRelease_v2)
    r.cuDevicePrimaryCtxRelease_v2(dev);
  else
    r.cuDevicePrimaryCtxRelease(dev);
  return ctx;
}

// A release ends the context only when it drops the last reference, which
// only the state after it tells; a reset ends an active one. Retains through
// the shim wait for the state to be read (docs/scheduler.md, "A context's
// end").
template <class Call>
CUresult primary_release(CUdevice dev, bool reset, Call&& call) {
  const ContextModules modules = modules_of_context(nullptr, dev);
  const AllocationState* st = allocation_state();
  const MemoryOp op(st);
  CUresult rc;
  bool ended = false;
  {
    const CUcontext primary = active_primary(dev);
    gate::ContextEnding ending(primary);
    {
      std::lock_guard lifecycle(primary_lifecycle_mutex(dev));
      rc = call();
      ended = rc == CUDA_SUCCESS && !primary_active(dev);
    }
    if (rc == CUDA_SUCCESS && primary && (reset || ended)) ending.ended();
  }
  if (st && ended) {
    modules_destroyed(*st, modules);
    context_destroyed(*st, nullptr, dev);
    release_destroyed_allocations(*st);
  }
  return rc;
}

}  // namespace

extern "C" CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuDevicePrimaryCtxRetain)
  CUSHARE_ACCOUNT_OR(r.cuDevicePrimaryCtxRetain(pctx, dev))
  std::lock_guard serial(measurement_mutex());
  if (primary_active(dev)) {
    // Active already: retained before (charged then), or made through the
    // runtime's private path (charged now, the first time the shim sees it).
    charge_unseen_primary(*st, dev);
    std::lock_guard lifecycle(primary_lifecycle_mutex(dev));
    return r.cuDevicePrimaryCtxRetain(pctx, dev);
  }
  const MemoryOp op(st);  // the reservation, to the daemon
  ContextReservation reservation(*st, dev);
  if (!reservation.ok()) return CUDA_ERROR_OUT_OF_MEMORY;
  const QuietWindow window(*st);
  const MemorySample before = sample_memory(*st, dev);
  CUresult rc;
  {
    std::lock_guard lifecycle(primary_lifecycle_mutex(dev));
    rc = r.cuDevicePrimaryCtxRetain(pctx, dev);
  }
  if (rc != CUDA_SUCCESS) return rc;
  const MemorySample after = sample_memory(*st, dev);
  reservation.created(nullptr, before, after, window.quiet());
  return rc;
}

extern "C" CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuDevicePrimaryCtxRelease_v2)
  return primary_release(dev, false, [&] { return r.cuDevicePrimaryCtxRelease_v2(dev); });
}

extern "C" CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuDevicePrimaryCtxRelease)
  return primary_release(dev, false, [&] { return r.cuDevicePrimaryCtxRelease(dev); });
}

extern "C" CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuDevicePrimaryCtxReset_v2)
  return primary_release(dev, true, [&] { return r.cuDevicePrimaryCtxReset_v2(dev); });
}

extern "C" CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuDevicePrimaryCtxReset)
  return primary_release(dev, true, [&] { return r.cuDevicePrimaryCtxReset(dev); });
}
