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

// Held by a release or reset of a primary context through its look at the
// state after the call, and by the shim's retains and looks at the handle: a
// retain in between would make the context active again and hide that the
// release ended it (and the gate would go on naming the handles that died
// with it). A driver callback on the holding thread that comes back here
// (the lock is not recursive) goes on without it.
thread_local bool t_lifecycle_held = false;

class PrimaryLifecycle {
 public:
  explicit PrimaryLifecycle(CUdevice dev) noexcept : held_(!t_lifecycle_held) {
    static std::array<std::mutex, 64> mutexes;
    mu_ = &mutexes[static_cast<unsigned>(dev) % mutexes.size()];
    if (!held_) return;
    mu_->lock();
    t_lifecycle_held = true;
  }
  ~PrimaryLifecycle() {
    if (!held_) return;
    t_lifecycle_held = false;
    mu_->unlock();
  }
  PrimaryLifecycle(const PrimaryLifecycle&) = delete;
  PrimaryLifecycle& operator=(const PrimaryLifecycle&) = delete;

 private:
  std::mutex* mu_;
  bool held_;
};

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
// the shim wait for the state to be read, and the handle the gate holds for
// is looked at again just before the call (docs/scheduler.md, "A context's
// end").
template <class Call>
CUresult primary_release(CUdevice dev, bool reset, Call&& call) {
  const ContextModules modules = modules_of_context(nullptr, dev);
  const AllocationState* st = allocation_state();
  const MemoryOp op(st);
  CUresult rc = CUDA_SUCCESS;
  bool ended = false;
  for (int attempt = 0;; ++attempt) {
    CUcontext primary;
    {
      const PrimaryLifecycle lifecycle(dev);
      primary = active_primary(dev);
    }
    gate::ContextEnding ending(primary);
    {
      const PrimaryLifecycle lifecycle(dev);
      // Made active (or inactive) by a retain (or another end) while the
      // gate got ready: ready again for the context there is now.
      const bool was_active = primary_active(dev);
      if (attempt < 3 && active_primary(dev) != primary) continue;
      rc = call();
      // A release after a reset (which keeps the references) ends nothing.
      ended = rc == CUDA_SUCCESS && was_active && !primary_active(dev);
    }
    if (rc == CUDA_SUCCESS && primary && (reset || ended)) ending.ended();
    break;
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
  {
    // Active already: retained before (charged then), or made through the
    // runtime's private path (charged now, the first time the shim sees it).
    // The look and the retain under the lifecycle lock: a last release
    // between them would make this retain a new context, never charged.
    bool active = false;
    CUresult rc = CUDA_SUCCESS;
    {
      const PrimaryLifecycle lifecycle(dev);
      active = primary_active(dev);
      if (active) rc = r.cuDevicePrimaryCtxRetain(pctx, dev);
    }
    if (active) {
      if (rc == CUDA_SUCCESS) charge_unseen_primary(*st, dev);
      return rc;
    }
  }
  const MemoryOp op(st);  // the reservation, to the daemon
  ContextReservation reservation(*st, dev);
  if (!reservation.ok()) return CUDA_ERROR_OUT_OF_MEMORY;
  const QuietWindow window(*st);
  const MemorySample before = sample_memory(*st, dev);
  CUresult rc;
  {
    const PrimaryLifecycle lifecycle(dev);
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
