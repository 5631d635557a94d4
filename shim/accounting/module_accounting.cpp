#include "shim/accounting/module_accounting.hpp"

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

#include "shim/accounting/context_overhead.hpp"
#include "shim/accounting/memory_accounting.hpp"
#include "shim/accounting/memory_quiescence.hpp"
#include "shim/driver/real_driver.hpp"
#include "shim/process/logging.hpp"

namespace cushare::shim {
namespace {

struct ModuleRecord {
  std::uint64_t id;  // unique: handles may be reused once unloaded
  void* handle;
  ModuleKind kind;
  CUcontext ctx;  // a module's context; nullptr for a library
  bool primary;   // ctx is its device's primary context
  CUdevice ordinal;
  unsigned gpu;
  std::uint64_t charged;
};

// Loads are rare and slow in the driver; a mutex is fine here.
std::mutex& records_mutex() noexcept {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<ModuleRecord>& records() noexcept {
  static auto* v = new std::vector<ModuleRecord>;
  return *v;
}
std::uint64_t g_next_id = 1;  // under records_mutex()

// The device a load lands on: the current context's. A library loaded with
// no context current goes to the device of the first context that uses it,
// unknown here: it is charged on device 0, the CUDA runtime's default.
struct Placement {
  CUcontext ctx = nullptr;
  CUdevice ordinal = 0;
};

Placement placement(const AllocationState& st) noexcept {
  Placement p;
  const RealDriver& r = real();
  if (r.cuCtxGetCurrent(&p.ctx) != CUDA_SUCCESS || !p.ctx) return {};
  if (r.cuCtxGetDevice(&p.ordinal) != CUDA_SUCCESS) p.ordinal = 0;
  note_device_use(st, p.ordinal);  // a primary context made unseen is charged first
  return p;
}

void log_refused(const AllocationState& st, const char* api, std::uint64_t bound,
                 std::uint64_t took) noexcept {
  log().error(
      "{} refused: the image took {} bytes of device memory, more than the {} bytes it was "
      "bounded by, and the rest does not fit in allocation '{}''s quota; it was unloaded",
      api, took, bound, st.limits->header.alloc_id);
}

}  // namespace

CUresult charged_module_load(const AllocationState& st, ModuleKind kind, const char* api,
                             std::uint64_t bound, void* const* handle, DriverCall load,
                             UnloadCall unload) noexcept {
  const Placement where = placement(st);
  std::lock_guard serial(measurement_mutex());
  const MemoryOp op(&st);  // the reservation, to the daemon
  const unsigned gpu = gpu_index_of_device(st, where.ordinal);
  if (!reserve(st, gpu, bound, api)) return CUDA_ERROR_OUT_OF_MEMORY;
  const QuietWindow window(st);
  const MemorySample before = sample_memory(st, where.ordinal);
  const CUresult rc = load();
  if (rc != CUDA_SUCCESS || !handle) {
    release(st, gpu, bound);
    return rc;
  }
  const MemorySample after = sample_memory(st, where.ordinal);
  std::uint64_t charged = bound;
  std::uint64_t took = 0;
  if (estimate_overhead(before, after, took) && took > 0) {
    if (took > bound && !reserve(st, gpu, took - bound, api)) {
      unload(*handle);
      release(st, gpu, bound);
      log_refused(st, api, bound, took);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    // Other memory calls still running may have moved the figures either
    // way: only a figure above the bound counts then (fail closed).
    const bool trusted = window.quiet() && before.pools_known && after.pools_known;
    if (took < bound && !trusted) {
      log_unquiet_measurement();
      took = bound;
    }
    if (took < bound) release(st, gpu, bound - took);
    charged = took;
  }
  const bool primary = where.ctx && !is_created_context(where.ctx);
  try {
    std::lock_guard lock(records_mutex());
    records().push_back({g_next_id++, *handle, kind,
                         kind == ModuleKind::kModule ? where.ctx : nullptr, primary, where.ordinal,
                         gpu, charged});
  } catch (const std::bad_alloc&) {
    // Not recorded: the charge stays until the process exits (fail closed).
  }
  log().debug("{} on device {}: bound {} bytes, charged {}", api, where.ordinal, bound, charged);
  return rc;
}

CUresult charged_module_unload(const AllocationState* st, ModuleKind kind, void* handle,
                               DriverCall unload) noexcept {
  // Serialised with loads: a load measuring meanwhile would count the memory
  // this returns, and a handle reused by a racing load would match the wrong
  // record.
  std::lock_guard serial(measurement_mutex());
  const MemoryOp op(st);  // for the daemon's measurement: no window opens meanwhile
  const CUresult rc = unload();
  if (rc != CUDA_SUCCESS || !st) return rc;
  std::lock_guard lock(records_mutex());
  auto& v = records();
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it->handle != handle || it->kind != kind) continue;
    release(*st, it->gpu, it->charged);
    v.erase(it);
    break;
  }
  return rc;
}

ContextModules modules_of_context(CUcontext ctx, CUdevice ordinal) noexcept {
  ContextModules ids;
  try {
    std::lock_guard lock(records_mutex());
    for (const auto& rec : records()) {
      if (rec.kind != ModuleKind::kModule) continue;
      if (ctx ? rec.ctx == ctx && !rec.primary : rec.primary && rec.ordinal == ordinal)
        ids.push_back(rec.id);
    }
  } catch (const std::bad_alloc&) {
    // Not returned: their charges stay until the process exits (fail closed).
  }
  return ids;
}

void modules_destroyed(const AllocationState& st, const ContextModules& modules) noexcept {
  if (modules.empty()) return;
  std::lock_guard lock(records_mutex());
  std::erase_if(records(), [&](const ModuleRecord& rec) {
    const bool gone = std::find(modules.begin(), modules.end(), rec.id) != modules.end();
    if (gone) release(st, rec.gpu, rec.charged);
    return gone;
  });
}

void module_reset_after_fork() noexcept {
  new (&records_mutex()) std::mutex;
  records().clear();
}

}  // namespace cushare::shim
