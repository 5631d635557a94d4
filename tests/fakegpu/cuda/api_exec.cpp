// Modules, libraries, kernels and their launches; streams, events, host callbacks.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <iterator>
#include <thread>

#include "tests/fakegpu/cuda/driver.hpp"
#include "tests/fakegpu/cuda/image_globals.hpp"
#include "tests/fakegpu/cuda/jit_log.hpp"
#include "tests/fakegpu/cuda/kernel_resources.hpp"
#include "tests/fakegpu/cuda/launch_limits.hpp"
#include "tests/fakegpu/cuda/module_memory.hpp"

using namespace fakegpu;

namespace {

HandleKind module_kind(bool library) {
  return library ? HandleKind::library : HandleKind::module;
}

// Size of a module image: PTX is NUL-terminated text; ELF cubins and fatbins
// carry their sizes in their headers; a fatbin wrapper points at a fatbin.
std::string image_bytes(const void* image, bool* ptx) {
  const auto* p = static_cast<const unsigned char*>(image);
  *ptx = false;
  uint32_t magic = 0;
  std::memcpy(&magic, p, 4);
  if (magic == 0x466243b1) {  // __fatBinC_Wrapper_t { magic, version, data, filename }
    const void* data = nullptr;
    std::memcpy(&data, p + 8, sizeof data);
    return data ? image_bytes(data, ptx) : std::string();
  }
  if (magic == 0xBA55ED50) {  // fatbin header { magic, u16 version, u16 header size, u64 fat size }
    uint16_t header = 0;
    uint64_t fat = 0;
    std::memcpy(&header, p + 6, 2);
    std::memcpy(&fat, p + 8, 8);
    return std::string(reinterpret_cast<const char*>(p), header + fat);
  }
  if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') {
    uint64_t shoff = 0;
    uint16_t shentsize = 0, shnum = 0;
    std::memcpy(&shoff, p + 0x28, 8);
    std::memcpy(&shentsize, p + 0x3A, 2);
    std::memcpy(&shnum, p + 0x3C, 2);
    return std::string(reinterpret_cast<const char*>(p), shoff + uint64_t{shentsize} * shnum);
  }
  *ptx = true;
  return std::string(reinterpret_cast<const char*>(p));
}

bool ptx_has_entry(const std::string& ptx, const std::string& name) {
  size_t at = 0;
  while ((at = ptx.find(".entry", at)) != std::string::npos) {
    at += 6;
    size_t start = ptx.find_first_not_of(" \t\r\n", at);
    if (start == std::string::npos) return false;
    size_t end = ptx.find_first_of(" \t\r\n(", start);
    if (ptx.compare(start, end - start, name) == 0) return true;
  }
  return false;
}

CUresult load_module(const void* image, bool library, Module** out) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (image == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // A module belongs to the current context; a library to the process.
  Context* owner = nullptr;
  if (!library) {
    if (CUresult r = need_context(&owner); r != CUDA_SUCCESS) return r;
  }
  auto* m = new Module();
  m->image = image_bytes(image, &m->ptx);
  m->library = library;
  if (m->ptx && m->image.find(".entry") == std::string::npos &&
      m->image.find(".version") == std::string::npos) {
    delete m;
    return CUDA_ERROR_INVALID_IMAGE;
  }
  m->global_sizes = image_globals(m->image, m->ptx);
  // A module is loaded onto its context's device; a library onto the current
  // context's, or lazily once one is current (place_library).
  Context* device_of = owner;
  if (library && need_context(&device_of) != CUDA_SUCCESS) device_of = nullptr;
  if (device_of != nullptr) {
    if (CUresult r = place_module(m, device_of->device); r != CUDA_SUCCESS) {
      delete m;
      return r;
    }
  }
  std::lock_guard<std::mutex> guard(driver().mu);
  register_handle(m, module_kind(library), owner);
  *out = m;
  return CUDA_SUCCESS;
}

CUresult read_file(const char* path, std::string& bytes) {
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_FILE_NOT_FOUND;
  struct stat sb {};
  // Only a regular file is an image (a directory opens, and reports a size
  // that is no length).
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    return CUDA_ERROR_FILE_NOT_FOUND;
  }
  // In reads of the size found, not a character at a time: images run to
  // tens of MiB. Whatever the file holds when read is the image (it may
  // have changed size since the stat).
  CUresult r = CUDA_SUCCESS;
  try {
    bytes.assign(static_cast<std::size_t>(sb.st_size) + 1, '\0');
    std::size_t got = 0;
    for (;;) {
      if (got + 1 == bytes.size()) bytes.resize(bytes.size() * 2);
      const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - 1 - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        r = CUDA_ERROR_FILE_NOT_FOUND;
        break;
      }
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
    }
    bytes.resize(got + 1);
    bytes[got] = '\0';
  } catch (const std::exception&) {  // no memory for it
    r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  ::close(fd);
  return r;
}

// What a CUmodule may name: a module, or a library's module (cuLibraryGetModule
// hands out the library object itself as its module).
constexpr HandleKind kModuleKinds[] = {HandleKind::module, HandleKind::library};
constexpr HandleKind kLibraryKinds[] = {HandleKind::library};

template <size_t N>
Module* as_module_of(const void* handle, const HandleKind (&kinds)[N]) {
  for (HandleKind k : kinds) {
    if (Module* m = handle_object<Module>(handle, k)) return m;
  }
  return nullptr;
}

// Looks `name` up in the module behind `handle`. The handle is resolved under
// driver().mu, which unload() holds while it deletes a module.
template <size_t N>
CUresult get_function(const void* handle, const HandleKind (&kinds)[N], const char* name,
                      Function** out) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  Module* m = as_module_of(handle, kinds);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto it = m->functions.find(name);
  if (it == m->functions.end()) {
    const bool found = m->ptx ? ptx_has_entry(m->image, name)
                              : m->image.find(std::string(name) + '\0') != std::string::npos;
    if (!found) return CUDA_ERROR_NOT_FOUND;
    auto fn = std::make_unique<Function>();
    fn->name = name;
    fn->spin = std::strstr(name, "spin") != nullptr;
    fn->module = m;
    fn->resources = kernel_resources(m->image, m->ptx, name);
    register_handle(fn.get(), HandleKind::function);
    it = m->functions.emplace(name, std::move(fn)).first;
  }
  *out = it->second.get();
  return CUDA_SUCCESS;
}

// What the JIT error log says about a load's result (empty on success).
const char* jit_error_text(CUresult r) {
  return r == CUDA_ERROR_INVALID_IMAGE ? "fakegpu: the image is not PTX, a cubin or a fatbin" : "";
}

// Deletes a module whose handle is forgotten and gives its device memory
// back. Takes driver().mu, which readers hold from lookup to last use.
void delete_module(Module* m) {
  int device = -1;
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    for (auto& [name, fn] : m->functions) unregister_handle(fn.get(), HandleKind::function);
    // Function objects stay allocated (leaked): a launch racing the unload on
    // another thread may still be reading the one it looked up.
    for (auto& [name, fn] : m->functions) (void)fn.release();
    bytes = unplace_module(m, &device);
    delete m;
  }
  if (bytes != 0) uncharge_device(device, bytes);
}

CUresult unload(const void* handle, HandleKind kind) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    if (!unregister_handle(handle, kind)) return CUDA_ERROR_INVALID_HANDLE;
  }
  delete_module(static_cast<Module*>(const_cast<void*>(handle)));
  return CUDA_SUCCESS;
}

// A library's memory is placed on the current context's device at the first
// use that needs one, when none was current at its load.
void place_if_library(const void* handle) {
  Context* c = nullptr;
  if (is_handle(handle, HandleKind::library) && need_context(&c) == CUDA_SUCCESS)
    (void)place_library(handle, c->device);
}

// A global of the module behind `handle`, by name; either output may be NULL,
// not both (cuModuleGetGlobal, cuLibraryGetGlobal).
template <size_t N>
CUresult get_global(const void* handle, const HandleKind (&kinds)[N], const char* name,
                    CUdeviceptr* dptr, size_t* bytes) {
  if (name == nullptr || (dptr == nullptr && bytes == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  const Module* m = as_module_of(handle, kinds);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const auto it = m->globals.find(name);
  if (it == m->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (dptr) *dptr = it->second.address;
  if (bytes) *bytes = it->second.size;
  return CUDA_SUCCESS;
}

CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, unsigned shared, CUstream stream, void** params, void** extra) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Function* fn = as_function(f);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (uint64_t{bx} * by * bz > 1024 || bx > 1024 || by > 1024 || bz > 64 || gy > 65535 ||
      gz > 65535) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (params && extra) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(stream, &s); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_launch_resources(*fn, s->ctx->device, uint64_t{bx} * by * bz, shared);
      r != CUDA_SUCCESS) {
    return r;
  }
  const uint64_t ns = kernel_duration_ns(fn, params, extra);
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return capture_kernel(s, ns);
  return submit(s, ItemKind::kernel, ns);
}

CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                params, extra);
}

// ---- streams ----

CUresult stream_sync(CUstream stream) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(stream, &s); r != CUDA_SUCCESS) return r;
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    invalidate_capture(s);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (CUresult r = unsafe_call_during_captures(); r != CUDA_SUCCESS) return r;
  CUresult r = wait_for(s->ctx, s->last_seq.load(), s);
  if (r == CUDA_SUCCESS) trim_pools_after_sync();
  return r;
}

CUresult stream_query(CUstream stream) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(stream, &s); r != CUDA_SUCCESS) return r;
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    invalidate_capture(s);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (CUresult r = unsafe_call_during_captures(); r != CUDA_SUCCESS) return r;
  return query(s->ctx, s->last_seq.load(), s);
}

// ---- events ----

Event* as_event(CUevent e) {
  Event* event = handle_object<Event>(e, HandleKind::event);
  if (event == nullptr) abort_if_freed(e, "a call on an event");
  return event;
}

CUresult event_record(CUevent event, CUstream stream, unsigned flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Event* e = as_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(stream, &s); r != CUDA_SUCCESS) return r;
  // "hStream ... must be from the same context [as the event] otherwise
  // CUDA_ERROR_INVALID_HANDLE is returned". The legacy and per-thread
  // handles name the current context's stream; how a driver answers one
  // whose context is not the event's is not documented, and they are let be.
  if (!is_builtin_stream(stream) && s->ctx != e->home) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return capture_event_record(s, e);
  const uint64_t ticket = e->next_ticket.fetch_add(1) + 1;
  uint64_t seq = 0;
  if (CUresult r = submit(s, ItemKind::marker, 0, e->slot, ticket, &seq); r != CUDA_SUCCESS)
    return r;
  uint64_t seen = e->ticket.load();
  while (seen < ticket && !e->ticket.compare_exchange_weak(seen, ticket)) {
  }
  e->ctx = s->ctx;
  e->captured = false;
  return CUDA_SUCCESS;
}

// State of an event: CUDA_SUCCESS when its latest record completed (or it
// was never recorded), CUDA_ERROR_NOT_READY otherwise; *time_ns if asked.
CUresult event_state(Event* e, uint64_t* time_ns) {
  Driver& d = driver();
  StateLock lock(*d.file);
  const EventSlot& slot = lock.state().events[e->slot];
  if (e->ticket == 0) return CUDA_SUCCESS;
  if (!record_completed(slot, e->ticket)) return CUDA_ERROR_NOT_READY;
  if (time_ns) *time_ns = slot.time_ns;
  return CUDA_SUCCESS;
}

struct HostCall {
  Context* ctx;
  const Stream* on;
  uint64_t seq;  // the host function's item; the callback runs once the engine reaches it
  int32_t slot;
  uint64_t ticket;
  CUhostFn fn;
  CUstreamCallback callback;
  CUstream stream;
  void* user;
};

// Runs one host callback when its stream position is reached, then lets the
// stream continue (the callback blocks later work, as on hardware).
void run_host_call(HostCall call) {
  CUresult status = wait_host_reached(call.ctx, call.on, call.seq, call.slot, call.ticket);
  if (call.fn && status == CUDA_SUCCESS) call.fn(call.user);
  if (call.callback) call.callback(call.stream, status, call.user);
  Driver& d = driver();
  StateLock lock(*d.file);
  EventSlot& slot = lock.state().events[call.slot];
  slot.host_done = call.ticket;
}

CUresult host_call(CUstream stream, CUhostFn fn, CUstreamCallback callback, void* user) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (fn == nullptr && callback == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(stream, &s); r != CUDA_SUCCESS) return r;
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  Driver& d = driver();
  int32_t slot;
  uint64_t before = 0;
  {
    StateLock lock(*d.file);
    slot = create_event(lock.state(), d.proc, &before);
  }
  if (slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t seq = 0;
  if (CUresult r = submit(s, ItemKind::host_fn, 0, slot, before + 1, &seq); r != CUDA_SUCCESS)
    return r;
  HostCall call{s->ctx, s, seq, slot, before + 1, fn, callback, stream, user};
  std::thread([call] {
    run_host_call(call);
    // The slot is freed once the engine has consumed the callback's item.
    Driver& drv = driver();
    wait_for(call.ctx, call.seq, call.on);
    StateLock lock(*drv.file);
    destroy_event(lock.state(), call.slot);
  }).detach();
  return CUDA_SUCCESS;
}

}  // namespace

// ---- modules ----

FAKEGPU_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  Module* m = nullptr;
  CUresult r = load_module(image, false, &m);
  if (r == CUDA_SUCCESS) *module = reinterpret_cast<CUmodule>(m);
  return r;
}

FAKEGPU_API CUresult cuModuleLoadDataEx(CUmodule* module, const void* image,
                                        unsigned int numOptions, CUjit_option* options,
                                        void** optionValues) {
  if (numOptions > 0 && (options == nullptr || optionValues == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = cuModuleLoadData(module, image);
  fill_jit_logs(numOptions, options, optionValues, "", jit_error_text(r));
  return r;
}

FAKEGPU_API CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return cuModuleLoadData(module, fatCubin);
}

FAKEGPU_API CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::string bytes;
  if (CUresult r = read_file(fname, bytes); r != CUDA_SUCCESS) return r;
  return cuModuleLoadData(module, bytes.data());
}

FAKEGPU_API CUresult cuModuleUnload(CUmodule hmod) {
  // Only a module: a library's module goes with cuLibraryUnload.
  return unload(hmod, HandleKind::module);
}

FAKEGPU_API CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  Function* fn = nullptr;
  CUresult r = get_function(hmod, kModuleKinds, name, &fn);
  if (r == CUDA_SUCCESS) *hfunc = reinterpret_cast<CUfunction>(fn);
  return r;
}

FAKEGPU_API CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod,
                                          const char* name) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  place_if_library(hmod);
  return get_global(hmod, kModuleKinds, name, dptr, bytes);
}

FAKEGPU_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;
  return check_ready();
}

// ---- libraries and kernels (a CUkernel is usable as a CUfunction) ----

FAKEGPU_API CUresult cuLibraryLoadData(CUlibrary* library, const void* code,
                                       CUjit_option* jitOptions, void** jitOptionsValues,
                                       unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                                       void** libraryOptionValues, unsigned int numLibraryOptions) {
  (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
  if (numJitOptions > 0 && (jitOptions == nullptr || jitOptionsValues == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  Module* m = nullptr;
  CUresult r = load_module(code, true, &m);
  if (r == CUDA_SUCCESS) *library = reinterpret_cast<CUlibrary>(m);
  fill_jit_logs(numJitOptions, jitOptions, jitOptionsValues, "", jit_error_text(r));
  return r;
}

FAKEGPU_API CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName,
                                           CUjit_option* jitOptions, void** jitOptionsValues,
                                           unsigned int numJitOptions,
                                           CUlibraryOption* libraryOptions,
                                           void** libraryOptionValues,
                                           unsigned int numLibraryOptions) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::string bytes;
  if (CUresult r = read_file(fileName, bytes); r != CUDA_SUCCESS) return r;
  return cuLibraryLoadData(library, bytes.data(), jitOptions, jitOptionsValues, numJitOptions,
                           libraryOptions, libraryOptionValues, numLibraryOptions);
}

FAKEGPU_API CUresult cuLibraryUnload(CUlibrary library) {
  return unload(library, HandleKind::library);
}

FAKEGPU_API CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                                        const char* name) {
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  place_if_library(library);
  return get_global(library, kLibraryKinds, name, dptr, bytes);
}

FAKEGPU_API CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  place_if_library(library);
  Function* fn = nullptr;
  CUresult r = get_function(library, kLibraryKinds, name, &fn);
  if (r == CUDA_SUCCESS) *pKernel = reinterpret_cast<CUkernel>(fn);
  return r;
}

FAKEGPU_API CUresult cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (pMod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (as_module_of(library, kLibraryKinds) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *pMod = reinterpret_cast<CUmodule>(library);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (as_function(reinterpret_cast<CUfunction>(kernel)) == nullptr)
    return CUDA_ERROR_INVALID_HANDLE;
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  *pFunc = reinterpret_cast<CUfunction>(kernel);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Function* fn = as_function(hfunc);
  if (fn == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *name = fn->name.c_str();
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuKernelGetName(const char** name, CUkernel hfunc) {
  return cuFuncGetName(name, reinterpret_cast<CUfunction>(hfunc));
}

// ---- launches ----

#define FAKEGPU_LAUNCH_PARAMS                                                         \
  (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, \
   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,            \
   unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra)
#define FAKEGPU_LAUNCH_ARGS                                                                  \
  f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, \
      kernelParams, extra

FAKEGPU_API CUresult cuLaunchKernel FAKEGPU_LAUNCH_PARAMS {
  return launch(FAKEGPU_LAUNCH_ARGS);
}
FAKEGPU_API CUresult cuLaunchKernel_ptsz FAKEGPU_LAUNCH_PARAMS {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return launch(FAKEGPU_LAUNCH_ARGS);
}

FAKEGPU_API CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                                      void** kernelParams, void** extra) {
  return launch_ex(config, f, kernelParams, extra);
}
FAKEGPU_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                           void** kernelParams, void** extra) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return launch_ex(config, f, kernelParams, extra);
}

#define FAKEGPU_COOP_PARAMS                                                           \
  (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, \
   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,            \
   unsigned int sharedMemBytes, CUstream hStream, void** kernelParams)
FAKEGPU_API CUresult cuLaunchCooperativeKernel FAKEGPU_COOP_PARAMS {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                hStream, kernelParams, nullptr);
}
FAKEGPU_API CUresult cuLaunchCooperativeKernel_ptsz FAKEGPU_COOP_PARAMS {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                hStream, kernelParams, nullptr);
}

FAKEGPU_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  return host_call(hStream, fn, nullptr, userData);
}
FAKEGPU_API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return host_call(hStream, fn, nullptr, userData);
}
FAKEGPU_API CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback,
                                         void* userData, unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return host_call(hStream, nullptr, callback, userData);
}
FAKEGPU_API CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                              void* userData, unsigned int flags) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return cuStreamAddCallback(hStream, callback, userData, flags);
}

void fakegpu::drop_module(void* module) {
  delete_module(static_cast<Module*>(module));
}

// ---- streams ----

FAKEGPU_API CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags,
                                                int priority) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (phStream == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)))
    return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  auto* s = new Stream();
  s->ctx = c;
  s->flags = flags;
  s->priority = std::clamp(priority, -5, 0);
  std::lock_guard<std::mutex> guard(driver().mu);
  s->id = driver().next_id++;
  register_handle(s, HandleKind::stream, c);
  *phStream = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return cuStreamCreateWithPriority(phStream, Flags, 0);
}

FAKEGPU_API CUresult cuStreamDestroy_v2(CUstream hStream) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  // Work already queued still runs (the driver defers the destruction). The
  // object stays allocated: its queued work, a capture or another thread's
  // call in flight may still reach it.
  if (!unregister_handle(hStream, HandleKind::stream)) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuStreamSynchronize(CUstream hStream) {
  return stream_sync(hStream);
}
FAKEGPU_API CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return stream_sync(hStream);
}
FAKEGPU_API CUresult cuStreamQuery(CUstream hStream) {
  return stream_query(hStream);
}
FAKEGPU_API CUresult cuStreamQuery_ptsz(CUstream hStream) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return stream_query(hStream);
}

namespace {
CUresult stream_wait_event(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (Flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  Event* e = as_event(hEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hStream, &s); r != CUDA_SUCCESS) return r;
  if (e->captured) return capture_wait_event(s, e);  // a fork or a join of a capture
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return CUDA_SUCCESS;                    // ordering inside a graph is sequential
  if (e->ticket == 0) return CUDA_SUCCESS;  // never recorded: nothing to wait for
  return submit(s, ItemKind::wait_event, 0, e->slot, e->ticket);
}

template <typename T, typename Get>
CUresult stream_field(CUstream hStream, T* out, Get get) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream_object(hStream, &s); r != CUDA_SUCCESS) return r;
  *out = get(s);
  return CUDA_SUCCESS;
}
}  // namespace

FAKEGPU_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return stream_wait_event(hStream, hEvent, Flags);
}
FAKEGPU_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return stream_wait_event(hStream, hEvent, Flags);
}

// The stream getters (and their _ptsz twins) read one field of the stream.
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuStreamGetFlags, (CUstream hStream, unsigned int* flags),
                       stream_field(hStream, flags, [](Stream* s) { return s->flags; }))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuStreamGetPriority, (CUstream hStream, int* priority),
                       stream_field(hStream, priority, [](Stream* s) { return s->priority; }))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuStreamGetId, (CUstream hStream, unsigned long long* streamId),
                       stream_field(hStream, streamId, [](Stream* s) { return s->id; }))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuStreamGetCtx, (CUstream hStream, CUcontext* pctx),
                       stream_field(hStream, pctx,
                                    [](Stream* s) { return reinterpret_cast<CUcontext>(s->ctx); }))
FAKEGPU_ASYNC_AND_PTSZ(CUresult, cuStreamGetDevice, (CUstream hStream, CUdevice* device),
                       stream_field(hStream, device,
                                    [](Stream* s) { return ordinal_of(s->ctx->device); }))

// ---- events ----

FAKEGPU_API CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (phEvent == nullptr || (Flags & ~0xFu)) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  int32_t slot;
  uint64_t before = 0;
  {
    StateLock lock(*d.file);
    slot = create_event(lock.state(), d.proc, &before);
  }
  if (slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* e = new Event();
  e->slot = slot;
  e->next_ticket = before;
  e->flags = Flags;
  e->ctx = c;
  e->home = c;
  register_handle(e, HandleKind::event, c);
  *phEvent = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuEventDestroy_v2(CUevent hEvent) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  // Forgotten first, so only one of two racing destroys frees the slot. The
  // object stays allocated: another thread's call in flight may still read it.
  if (!unregister_handle(hEvent, HandleKind::event)) {
    abort_if_freed(hEvent, "cuEventDestroy");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  drop_event(hEvent);
  return CUDA_SUCCESS;
}

void fakegpu::drop_event(void* event) {
  Driver& d = driver();
  StateLock lock(*d.file);
  destroy_event(lock.state(), static_cast<Event*>(event)->slot);
}

FAKEGPU_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  return event_record(hEvent, hStream, 0);
}
FAKEGPU_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return event_record(hEvent, hStream, 0);
}
FAKEGPU_API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return event_record(hEvent, hStream, flags);
}
FAKEGPU_API CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                                 unsigned int flags) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return event_record(hEvent, hStream, flags);
}

FAKEGPU_API CUresult cuEventQuery(CUevent hEvent) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Event* e = as_event(hEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (e->captured) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (CUresult r = unsafe_call_during_captures(); r != CUDA_SUCCESS) return r;
  return event_state(e, nullptr);
}

FAKEGPU_API CUresult cuEventSynchronize(CUevent hEvent) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Event* e = as_event(hEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (e->captured) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (CUresult r = unsafe_call_during_captures(); r != CUDA_SUCCESS) return r;
  for (;;) {
    // Destroyed while this waits (with its context, or by another thread):
    // a real driver may act on freed memory here.
    if (!is_handle(e, HandleKind::event))
      abort_if_freed(e, "cuEventSynchronize, waiting when it was destroyed,");
    CUresult r = event_state(e, nullptr);
    if (r == CUDA_SUCCESS) trim_pools_after_sync();
    if (r != CUDA_ERROR_NOT_READY) return r;
    // Sleep until roughly when the context could have reached the marker.
    uint64_t wake;
    {
      Driver& d = driver();
      StateLock lock(*d.file);
      const int32_t ctx_slot = e->ctx.load()->slot;
      const ContextSlot& c = lock.state().contexts[ctx_slot];
      uint64_t target = 0;
      const uint64_t* lane = nullptr;
      for (uint32_t i = 0; i < c.count; ++i) {
        const WorkItem& item = c.items[(c.head + i) % kQueueCap];
        if (item.kind == ItemKind::marker && item.slot == e->slot && item.ticket == e->ticket) {
          target = item.seq;
          lane = &item.lane;
        }
      }
      wake = lock.now() +
             std::clamp<uint64_t>(wait_hint_ns(lock.state(), ctx_slot, target, lock.now(), lane),
                                  20'000, 50'000'000);
    }
    sleep_until_ns(wake);
  }
}

namespace {
CUresult elapsed(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Event *a = as_event(hStart), *b = as_event(hEnd);
  if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (a->ticket == 0 || b->ticket == 0) return CUDA_ERROR_INVALID_HANDLE;
  uint64_t ta = 0, tb = 0;
  if (CUresult r = event_state(a, &ta); r != CUDA_SUCCESS) return r;
  if (CUresult r = event_state(b, &tb); r != CUDA_SUCCESS) return r;
  *pMilliseconds = static_cast<float>((static_cast<double>(tb) - static_cast<double>(ta)) / 1e6);
  return CUDA_SUCCESS;
}
}  // namespace

FAKEGPU_API CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return elapsed(pMilliseconds, hStart, hEnd);
}
FAKEGPU_API CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return elapsed(pMilliseconds, hStart, hEnd);
}
