// Initialisation, versions, errors, devices, primary and explicit contexts.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/fakegpu/core/pid_view.hpp"
#include "tests/fakegpu/cuda/array_shape.hpp"
#include "tests/fakegpu/cuda/driver.hpp"
#include "tests/fakegpu/cuda/driver_thread.hpp"
#include "tests/fakegpu/cuda/sm_limits.hpp"

using namespace fakegpu;

namespace {

CUresult device_index(CUdevice dev) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (!valid_ordinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

const DeviceSlot& device_slot(CUdevice dev) {
  return driver().file->state().devices[physical(dev)];
}

// Takes an engine slot for a context on `device` (charging its overhead).
CUresult open_engine_slot(int device, int32_t* slot, uint64_t* generation) {
  Driver& d = driver();
  for (int attempt = 0; attempt < 2; ++attempt) {
    StateLock lock(*d.file, attempt == 1);
    bool oom = false;
    *slot = create_context(lock.state(), d.proc, static_cast<uint32_t>(device),
                           lock.state().header.context_overhead, lock.now(), &oom);
    if (*slot >= 0) {
      *generation = lock.state().contexts[*slot].generation;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

// Gives the slot back (its queued work is dropped, its overhead returned) and
// everything the context owns with it.
void close_engine_slot(Context* ctx) {
  destroy_context_state(ctx);
  Driver& d = driver();
  StateLock lock(*d.file);
  SharedState& s = lock.state();
  if (ctx->slot >= 0 && s.contexts[ctx->slot].generation == ctx->generation)
    destroy_context(s, ctx->slot, lock.now());
}

CUresult create_context_object(CUdevice dev, unsigned flags, Context** out) {
  Driver& d = driver();
  int32_t slot = -1;
  uint64_t generation = 0;
  if (CUresult r = open_engine_slot(physical(dev), &slot, &generation); r != CUDA_SUCCESS) return r;
  auto* ctx = new Context();
  ctx->slot = slot;
  ctx->generation = generation;
  ctx->device = physical(dev);
  ctx->flags = flags;
  ctx->default_stream.ctx = ctx;
  {
    std::lock_guard<std::mutex> guard(d.mu);
    ctx->id = d.next_id++;
    ctx->default_stream.id = 0;
    d.contexts.push_back(ctx);
    register_handle(ctx, HandleKind::context);
  }
  // A real driver takes tens to hundreds of milliseconds to make a context,
  // holding its memory well before it returns.
  if (d.config.context_create_us) usleep(static_cast<useconds_t>(d.config.context_create_us));
  *out = ctx;
  return CUDA_SUCCESS;
}

void destroy_context_object(Context* ctx) {
  close_engine_slot(ctx);
  Driver& d = driver();
  std::lock_guard<std::mutex> guard(d.mu);
  std::erase(d.contexts, ctx);
  // The handle is invalid from now on; the object stays allocated because other
  // threads' context stacks and its streams and events still point at it.
  unregister_handle(ctx, HandleKind::context);
}

// The primary context of every device is one handle for the life of the
// process, as in the driver: it exists before the first retain (inactive: it
// may be made current, but work in it is CUDA_ERROR_CONTEXT_IS_DESTROYED),
// and release-to-zero or reset deactivate it without invalidating it.
void make_primary_handles() {
  Driver& d = driver();
  for (int i = 0; i < visible_count(); ++i) {
    auto* ctx = new Context();
    ctx->device = physical(i);
    ctx->primary = true;
    ctx->active = false;
    ctx->default_stream.ctx = ctx;
    ctx->id = d.next_id++;
    d.primary[i] = ctx;
    register_handle(ctx, HandleKind::context);
  }
}

// Caller holds the primary lock of the device.
CUresult activate_primary(CUdevice dev) {
  Driver& d = driver();
  Context* ctx = d.primary[dev];
  int32_t slot = -1;
  uint64_t generation = 0;
  if (CUresult r = open_engine_slot(ctx->device, &slot, &generation); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> guard(d.mu);
    ctx->slot = slot;
    ctx->generation = generation;
    ctx->flags = d.primary_flags[dev];
    ctx->last_seq = 0;
    ctx->default_stream.last_seq = 0;
    ctx->active = true;
    d.contexts.push_back(ctx);
  }
  // As slow as a creation (create_context_object); other retains of the
  // device wait for it on the primary lock, as on a real driver.
  if (d.config.context_create_us) usleep(static_cast<useconds_t>(d.config.context_create_us));
  return CUDA_SUCCESS;
}

// Caller holds the primary lock of the device.
void deactivate_primary(CUdevice dev) {
  Driver& d = driver();
  Context* ctx = d.primary[dev];
  if (!ctx->active) return;
  ctx->active = false;  // new work is refused from here on
  close_engine_slot(ctx);
  std::lock_guard<std::mutex> guard(d.mu);
  std::erase(d.contexts, ctx);
}

// Serialises retain, release and reset of the primary contexts.
std::mutex& primary_lock() {
  static auto* mu = new std::mutex();
  return *mu;
}

}  // namespace

FAKEGPU_API CUresult cuInit(unsigned int Flags) {
  Driver& d = driver();
  std::lock_guard<std::mutex> guard(d.mu);
  if (d.forked) return CUDA_ERROR_NOT_INITIALIZED;
  if (d.initialized) return Flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ConfigResult loaded = load_config();
  if (!loaded.config) {
    std::fprintf(stderr, "%s\n", loaded.error.c_str());
    d.init_error = CUDA_ERROR_INVALID_VALUE;
    return d.init_error;
  }
  d.config = *loaded.config;
  set_freed_handle_policy(d.config.abort_on_freed_handle);
  std::string error;
  d.file = StateFile::open(d.config, error);
  if (d.file == nullptr) {
    std::fprintf(stderr, "%s\n", error.c_str());
    d.init_error = CUDA_ERROR_OPERATING_SYSTEM;
    return d.init_error;
  }
  StateLock lock(*d.file, true);
  SharedState& s = lock.state();
  if (s.header.device_count != d.config.devices.size()) {
    std::fprintf(stderr,
                 "fakegpu: state file '%s' describes %u devices but FAKEGPU_DEVICES gives %zu; "
                 "use the same FAKEGPU_DEVICES for every process or run fakegpu-stat --reset\n",
                 d.file->path().c_str(), s.header.device_count, d.config.devices.size());
    d.init_error = CUDA_ERROR_INVALID_VALUE;
    return d.init_error;
  }
  // The node is what its creator configured; a different environment is
  // almost certainly a test mistake, so say so (and use the file).
  for (uint32_t i = 0; i < s.header.device_count; ++i) {
    const DeviceSpec& spec = d.config.devices[i];
    if (spec.name != s.devices[i].name || spec.memory != s.devices[i].total_mem ||
        spec.sms != s.devices[i].sms) {
      std::fprintf(stderr,
                   "fakegpu: warning: FAKEGPU_DEVICES differs from state file '%s' (device %u is "
                   "%s, %llu bytes); "
                   "using the state file\n",
                   d.file->path().c_str(), i, s.devices[i].name,
                   static_cast<unsigned long long>(s.devices[i].total_mem));
      break;
    }
  }
  if (d.config.timeslice_ns != s.header.timeslice_ns ||
      d.config.context_overhead != s.header.context_overhead) {
    std::fprintf(stderr,
                 "fakegpu: warning: FAKEGPU_TIMESLICE_US/FAKEGPU_CONTEXT_OVERHEAD differ from "
                 "state file '%s' "
                 "(%llu us, %llu bytes); using the state file\n",
                 d.file->path().c_str(),
                 static_cast<unsigned long long>(s.header.timeslice_ns / 1000),
                 static_cast<unsigned long long>(s.header.context_overhead));
  }
  // CUDA_VISIBLE_DEVICES selects and orders the devices this process sees
  // (NVML keeps seeing all of them, as with the real driver).
  d.visible = parse_visible_devices(std::getenv("CUDA_VISIBLE_DEVICES"), s);
  if (d.visible.empty()) {
    d.init_error = CUDA_ERROR_NO_DEVICE;
    return d.init_error;
  }
  // Register this process: a free slot, else the longest-exited one.
  int32_t chosen = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(kMaxProcs); ++i) {
    if (s.procs[i].state == SlotState::free) {
      chosen = i;
      break;
    }
    if (s.procs[i].state == SlotState::exited &&
        (chosen < 0 || s.procs[i].registered_ns < s.procs[chosen].registered_ns)) {
      chosen = i;
    }
  }
  if (chosen < 0) {
    std::fprintf(stderr, "fakegpu: more than %u live processes on state file '%s'\n", kMaxProcs,
                 d.file->path().c_str());
    d.init_error = CUDA_ERROR_OPERATING_SYSTEM;
    return d.init_error;
  }
  ProcSlot& p = s.procs[chosen];
  std::memset(static_cast<void*>(&p), 0, sizeof p);
  p.pid = getpid();
  p.start_ticks = process_start_ticks(p.pid);
  p.pidns = own_pidns();
  p.registered_ns = lock.now();
  p.state = SlotState::live;
  d.proc = chosen;
  d.pid = p.pid;
  d.init_error = CUDA_SUCCESS;
  make_primary_handles();
  pthread_atfork(nullptr, nullptr, [] { driver().forked = true; });
  start_driver_thread();
  d.initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Works before cuInit, like the real driver.
  Driver& d = driver();
  if (d.initialized) {
    *driverVersion = d.config.driver_version;
    return CUDA_SUCCESS;
  }
  ConfigResult loaded = load_config();
  if (!loaded.config) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = loaded.config->driver_version;
  return CUDA_SUCCESS;
}

namespace {

struct ErrorEntry {
  CUresult value;
  const char* name;
  const char* text;
};

// Every CUresult cuda.h names, with its name and description.
constexpr ErrorEntry kErrors[] = {
#define FAKEGPU_ERROR(value, name, text) {value, name, text},
#include "tests/fakegpu/cuda/error_table.inc"
#undef FAKEGPU_ERROR
};

const ErrorEntry* find_error(CUresult error) {
  for (const ErrorEntry& e : kErrors)
    if (e.value == error) return &e;
  return nullptr;
}

}  // namespace

FAKEGPU_API CUresult cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorEntry* e = find_error(error);
  *pStr = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKEGPU_API CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorEntry* e = find_error(error);
  *pStr = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKEGPU_API CUresult cuDeviceGetCount(int* count) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = visible_count();
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "%s", device_slot(dev).name);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(uuid->bytes, device_slot(dev).uuid_bytes, 16);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  return cuDeviceGetUuid(uuid, dev);
}

FAKEGPU_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = device_slot(dev).total_mem;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *major = device_slot(dev).cc_major;
  *minor = device_slot(dev).cc_minor;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  if (pi == nullptr || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
    return CUDA_ERROR_INVALID_VALUE;
  const DeviceSlot& d = device_slot(dev);
  const SmLimits& sm = sm_limits(d.cc_major, d.cc_minor);
  int v = 0;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
      v = static_cast<int>(sm.smem_reserved_per_block);
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      v = static_cast<int>(d.sms);
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      v = d.cc_major;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      v = d.cc_minor;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      v = sm.max_threads_per_block;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      v = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      v = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      v = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      v = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      v = static_cast<int>(sm.smem_per_block);
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      v = static_cast<int>(sm.smem_per_block_optin);
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      v = static_cast<int>(sm.smem_per_sm);
      break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      v = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      v = sm.warp_size;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      v = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      v = sm.regs_per_block;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      v = sm.regs_per_sm;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      v = 1980000;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      v = 2619000;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      v = 5120;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      v = 50331648;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      v = sm.max_threads_per_sm;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      v = sm.max_blocks_per_sm;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      v = 512;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      v = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      v = 2;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      v = 0x18 + physical(dev);
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
      v = CU_COMPUTEMODE_DEFAULT;
      break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
      v = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
      break;
    default:
      v = texture_limit(attrib);  // the limits cuArray3DCreate checks; 0 for the rest
      break;
  }
  *pi = v;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(pciBusId, static_cast<size_t>(len), "00000000:%02X:00.0", 0x18 + physical(dev));
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < visible_count(); ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "00000000:%02X:00.0", 0x18 + physical(i));
    if (strcasecmp(id, pciBusId) == 0 || strcasecmp(id + 4, pciBusId) == 0) {
      *dev = static_cast<CUdevice>(i);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

// ---- primary contexts ----

FAKEGPU_API CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard<std::mutex> once(primary_lock());
  if (!d.primary[dev]->active) {
    if (CUresult r = activate_primary(dev); r != CUDA_SUCCESS) return r;
  }
  ++d.primary_refs[dev];
  *pctx = reinterpret_cast<CUcontext>(d.primary[dev]);
  return CUDA_SUCCESS;
}

// The CUDA runtime retains and makes current the primary context through a
// private interface of the driver (an export table), so an interposer of the
// public API sees no call that creates it. fakegpu exports that path under a
// name no interposer hooks, for the tests that must meet such a context.
FAKEGPU_API CUresult fakegpuPrivatePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  return cuDevicePrimaryCtxRetain(pctx, dev);
}

// The runtime also reads the primary context's handle through that interface
// before it retains it, and makes it current first.
FAKEGPU_API CUresult fakegpuPrivatePrimaryCtxGet(CUcontext* pctx, CUdevice dev) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(driver().primary[dev]);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  std::lock_guard<std::mutex> once(primary_lock());
  // A reset destroys the context but keeps the references ("resetting the
  // primary context does not release it"): their holders may still release
  // them, and the next retain makes a new context.
  if (d.primary_refs[dev] <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--d.primary_refs[dev] == 0 && d.primary[dev]->active) {
    Context* ctx = d.primary[dev];
    wait_for(ctx, ctx->last_seq.load());
    deactivate_primary(dev);
  }
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return cuDevicePrimaryCtxRelease_v2(dev);
}

FAKEGPU_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  if (flags & ~0x1fu) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard<std::mutex> once(primary_lock());
  d.primary_flags[dev] = flags;
  d.primary[dev]->flags = flags;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

FAKEGPU_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard<std::mutex> once(primary_lock());
  *flags = d.primary_flags[dev];
  *active = d.primary[dev]->active ? 1 : 0;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> once(primary_lock());
  deactivate_primary(dev);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  return cuDevicePrimaryCtxReset_v2(dev);
}

// ---- explicit contexts ----

FAKEGPU_API CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  if (CUresult r = device_index(dev); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr || (flags & ~0x1fu)) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  if (CUresult r = create_context_object(dev, flags, &ctx); r != CUDA_SUCCESS) return r;
  context_stack().push_back(ctx);  // a new context becomes current
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray,
                                    int numParams, unsigned int flags, CUdevice dev) {
  if (numParams < 0 || (numParams > 0 && paramsArray == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return cuCtxCreate_v2(pctx, flags, dev);
}

FAKEGPU_API CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams,
                                    unsigned int flags, CUdevice dev) {
  if (ctxCreateParams && ctxCreateParams->cigParams) return CUDA_ERROR_NOT_SUPPORTED;
  return cuCtxCreate_v2(pctx, flags, dev);
}

FAKEGPU_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Context* c = as_context(ctx);
  if (c == nullptr || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  wait_for(c, c->last_seq.load());
  // Popped only where it is current to the caller ("as though
  // cuCtxPopCurrent() were called"); below the top of the caller's stack, or
  // current to other threads, it stays, and calls in it get
  // CUDA_ERROR_CONTEXT_IS_DESTROYED.
  auto& stack = context_stack();
  if (!stack.empty() && stack.back() == c) stack.pop_back();
  destroy_context_object(c);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Context* c = as_context(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  context_stack().push_back(c);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  auto& stack = context_stack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Context* c = as_context(ctx);
  if (ctx != nullptr && c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  set_current(c);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(current_context());
  return CUDA_SUCCESS;
}

namespace {
// The context a call names, or the calling thread's current one for NULL;
// nullptr unless that context is live.
Context* ctx_or_current(CUcontext ctx) {
  Context* c = ctx ? as_context(ctx) : current_context();
  return context_alive(c) ? c : nullptr;
}
}  // namespace

FAKEGPU_API CUresult cuCtxGetDevice(CUdevice* device) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = current_context();
  if (!context_alive(c)) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ordinal_of(c->device);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = ctx_or_current(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ordinal_of(c->device);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Context* c = nullptr;
  if (ctx == nullptr) {
    // The current context: none, or one destroyed (or an inactive primary
    // one) while current, as every call in it answers.
    if (CUresult r = need_context(&c); r != CUDA_SUCCESS) return r;
  } else if (c = ctx_or_current(ctx); c == nullptr) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (CUresult r = unsafe_call_during_captures(); r != CUDA_SUCCESS) return r;
  CUresult r = wait_for(c, c->last_seq.load());
  if (r == CUDA_SUCCESS) trim_pools_after_sync();
  return r;
}

FAKEGPU_API CUresult cuCtxSynchronize(void) {
  return cuCtxSynchronize_v2(nullptr);
}

FAKEGPU_API CUresult cuCtxGetFlags(unsigned int* flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Context* c = current_context();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = c->flags;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxSetFlags(unsigned int flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Context* c = current_context();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  c->flags = flags;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Context* c = ctx_or_current(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctxId = c->id;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Context* c = ctx_or_current(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 3020;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (pvalue == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
      *pvalue = 1024;
      return CUDA_SUCCESS;
    case CU_LIMIT_PRINTF_FIFO_SIZE:
      *pvalue = 1 << 20;
      return CUDA_SUCCESS;
    case CU_LIMIT_MALLOC_HEAP_SIZE:
      *pvalue = 8 << 20;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_UNSUPPORTED_LIMIT;
  }
}

FAKEGPU_API CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  (void)value;
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
      return CUDA_SUCCESS;  // accepted; not charged (see docs/fakegpu.md)
    default:
      return CUDA_ERROR_UNSUPPORTED_LIMIT;
  }
}

FAKEGPU_API CUresult cuCtxGetCacheConfig(CUfunc_cache* pconfig) {
  if (pconfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pconfig = CU_FUNC_CACHE_PREFER_NONE;
  return check_ready();
}

FAKEGPU_API CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  (void)config;
  return check_ready();
}
