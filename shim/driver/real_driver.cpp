#include "shim/driver/real_driver.hpp"

#include <dlfcn.h>

#include <mutex>

namespace cushare::shim {
namespace detail {

RealDriver g_real_driver;
RealNvml g_real_nvml;
std::atomic<bool> g_real_driver_ready{false};
std::atomic<bool> g_real_nvml_ready{false};

namespace {

// Loading is rare (once per process, again never); a mutex is fine here.
// Its lifetime must outlast atexit handlers that still call CUDA, hence the
// leaked heap object.
std::mutex& load_mutex() {
  static auto* m = new std::mutex;
  return *m;
}

template <class Fn>
void resolve(void* handle, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(real_dlsym()(handle, name));
}

}  // namespace

void load_real_driver() noexcept {
  std::lock_guard lock(load_mutex());
  if (g_real_driver_ready.load(std::memory_order_relaxed)) return;
  // By soname, so the loader's search (LD_LIBRARY_PATH, cuda-compat) decides
  // which driver library this is, exactly as for the application itself.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NODELETE);
  if (handle) {
    g_real_driver.library_loaded = true;
#define CUSHARE_LOAD(sym, type, need) resolve(handle, #sym, g_real_driver.sym);
    CUSHARE_HOOKED_DRIVER_FUNCTIONS(CUSHARE_LOAD)
    CUSHARE_REAL_ONLY_DRIVER_FUNCTIONS(CUSHARE_LOAD)
#undef CUSHARE_LOAD
  }
  g_real_driver_ready.store(true, std::memory_order_release);
}

void load_real_nvml() noexcept {
  std::lock_guard lock(load_mutex());
  if (g_real_nvml_ready.load(std::memory_order_relaxed)) return;
  void* handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NODELETE);
  if (handle) {
    g_real_nvml.library_loaded = true;
#define CUSHARE_LOAD(sym, type, need) resolve(handle, #sym, g_real_nvml.sym);
    CUSHARE_HOOKED_NVML_FUNCTIONS(CUSHARE_LOAD)
    CUSHARE_REAL_ONLY_NVML_FUNCTIONS(CUSHARE_LOAD)
#undef CUSHARE_LOAD
  }
  g_real_nvml_ready.store(true, std::memory_order_release);
}

}  // namespace detail

DlsymFn real_dlsym() noexcept {
  static std::atomic<DlsymFn> cached{nullptr};
  DlsymFn fn = cached.load(std::memory_order_acquire);
  if (fn) return fn;
  // RTLD_NEXT from the shim: the definition after ours, i.e. glibc's.
  void* found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
#if defined(__x86_64__)
  if (!found) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
#elif defined(__aarch64__)
  if (!found) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
#endif
  fn = reinterpret_cast<DlsymFn>(found);
  cached.store(fn, std::memory_order_release);
  return fn;
}

void bind_real_if_missing(void** slot, void* fn) noexcept {
  if (!fn) return;
  void* expected = nullptr;
  __atomic_compare_exchange_n(slot, &expected, fn, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

}  // namespace cushare::shim
