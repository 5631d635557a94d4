#pragma once
// Process-local side of the simulated driver: handles (contexts, streams,
// events, modules), the device address space with optional host backing, and
// the helpers every API entry point uses to reach the shared engine.
// Declares every versioned export with its exact signature: the switch
// cuda.h reads when the driver itself includes it.
#define __CUDA_API_VERSION_INTERNAL 1  // NOLINT(bugprone-reserved-identifier): cuda.h's name
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tests/fakegpu/core/config.hpp"
#include "tests/fakegpu/core/engine.hpp"
#include "tests/fakegpu/core/state_file.hpp"
#include "tests/fakegpu/cuda/handle_registry.hpp"
#include "tests/fakegpu/cuda/kernel_resources.hpp"

#define FAKEGPU_API extern "C" __attribute__((visibility("default")))
// An entry point and its per-thread default stream twin (_ptds for the
// synchronous forms, _ptsz for the stream-taking ones): the same call, in
// which the NULL stream is the calling thread's per-thread default stream
// rather than the legacy one.
#define FAKEGPU_WITH_PER_THREAD(suffix, ret, name, params, call)       \
  FAKEGPU_API ret name params {                                        \
    return call;                                                       \
  }                                                                    \
  FAKEGPU_API ret name##suffix params {                                \
    const fakegpu::PerThreadDefaultStream per_thread_default_stream{}; \
    return call;                                                       \
  }
#define FAKEGPU_SYNC_AND_PTDS(...) FAKEGPU_WITH_PER_THREAD(_ptds, __VA_ARGS__)
#define FAKEGPU_ASYNC_AND_PTSZ(...) FAKEGPU_WITH_PER_THREAD(_ptsz, __VA_ARGS__)

namespace fakegpu {

struct Graph;
struct Context;

struct Stream {
  Context* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  uint64_t id = 0;
  std::atomic<uint64_t> last_seq{0};  // the stream is done once its items through this are
  // Stream capture (a capturing stream records work into `graph` instead of running it).
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  Graph* graph = nullptr;
  uint64_t capture_id = 0;
  // A stream joins another's capture by waiting on an event recorded in it
  // (the fork of a fork/join capture): it records into the origin's graph,
  // and the origin's end ends its capture too. The origin must have waited
  // on all of its captured work by then (the join), or the end fails with
  // CUDA_ERROR_STREAM_CAPTURE_UNJOINED.
  Stream* capture_origin = nullptr;     // on a joined stream
  std::vector<Stream*> capture_joined;  // on the origin
  uint64_t capture_ops = 0;             // operations captured on this stream
  uint64_t capture_joined_ops = 0;      // of them, those a stream of the capture waited on
  // On the origin: a prohibited call invalidated the capture (any thread's).
  std::atomic<bool> capture_invalidated{false};
};

struct Context {
  int32_t slot = -1;
  uint64_t generation = 0;
  int device = 0;
  bool primary = false;
  // A primary context outside retain..release-to-zero/reset keeps its handle
  // but has no engine slot (slot -1): work in it is CONTEXT_IS_DESTROYED.
  std::atomic<bool> active{true};
  unsigned flags = 0;
  uint64_t id = 0;
  Stream default_stream;  // the legacy default stream (NULL, CU_STREAM_LEGACY)
  // Per-thread default streams (CU_STREAM_PER_THREAD, and NULL in a _ptsz or
  // _ptds entry point): one per thread, made at its first use. Never freed,
  // as other streams: a call in flight may still hold one.
  std::mutex per_thread_mu;
  std::unordered_map<std::thread::id, Stream*> per_thread_streams;
  // Blocking streams of this context in a capture: the legacy stream, whose
  // work would wait for theirs, cannot be used meanwhile.
  std::atomic<int> blocking_captures{0};
  std::atomic<uint64_t> last_seq{0};
};

// While one lives, the NULL stream names the calling thread's per-thread
// default stream (the _ptsz/_ptds twins of the entry points hold one).
class PerThreadDefaultStream {
 public:
  PerThreadDefaultStream();
  ~PerThreadDefaultStream();
  PerThreadDefaultStream(const PerThreadDefaultStream&) = delete;
  PerThreadDefaultStream& operator=(const PerThreadDefaultStream&) = delete;

 private:
  bool outer_;
};

struct Event {
  // Written by every record, read by threads synchronising on the event at
  // the same time (which the driver allows): atomic.
  std::atomic<Context*> ctx{nullptr};  // where its latest record was queued
  Context* home = nullptr;             // the context it was made in
  int32_t slot = -1;
  unsigned flags = 0;
  std::atomic<uint64_t> ticket{0};  // record number of the latest cuEventRecord, 0 = never recorded
  std::atomic<uint64_t> next_ticket{0};
  std::atomic<bool> captured{false};
  // Recorded during a capture: where, and after how many captured operations there.
  std::atomic<Stream*> capture_stream{nullptr};
  std::atomic<uint64_t> capture_ops{0};
};

struct Module;
struct Function {
  std::string name;
  bool spin = false;  // runs for the ns in its first uint64_t parameter
  Module* module = nullptr;
  KernelResources resources;  // from the image, fixed at the first lookup
  // What cuFuncSetAttribute / cuKernelSetAttribute set (guarded by driver().mu);
  // an attribute not in here has its default.
  std::map<CUfunction_attribute, int> settings;
};

struct ModuleGlobal {
  uint64_t address = 0;
  uint64_t size = 0;
};

struct Module {
  std::string image;  // PTX text or binary, searched for function names
  bool ptx = false;
  bool library = false;
  std::map<std::string, std::unique_ptr<Function>> functions;
  std::map<std::string, uint64_t> global_sizes;  // what the image defines
  // Where the module is loaded (module_memory.hpp): the device, what it takes
  // there, and its globals' addresses. device -1: not on a device yet (a
  // library loaded while no context was current).
  int device = -1;
  uint64_t charged = 0;
  std::map<std::string, ModuleGlobal> globals;
};

// Memory that a device address range resolves to. Host-accessible kinds
// (managed, pinned host) point at real host memory; device kinds get lazily
// allocated host backing while the process's FAKEGPU_HOST_BACKING lasts.
struct Backing {
  uint64_t size = 0;
  uint8_t* host = nullptr;
  std::unique_ptr<uint8_t[]> lazy;
  // An exported VMM allocation's bytes: a MAP_SHARED view of its memfd, so
  // every process mapping it sees the same memory (`host` points into it).
  std::shared_ptr<uint8_t> shared;
  bool unbacked = false;  // beyond the backing budget: writes vanish, reads give zeros
};

enum class RegionKind { device, pitch, managed, async, host, array, vmm_map, ipc, graph, global };

struct Region {
  uint64_t size = 0;
  RegionKind kind = RegionKind::device;
  int device = 0;
  uint64_t charged = 0;  // bytes charged to the device for this region (0 for mappings/imports)
  std::shared_ptr<Backing> backing;
  uint64_t backing_offset = 0;
  bool owns_va = true;             // release the address range on free
  void* pool = nullptr;            // async allocations: owning pool
  const Context* owner = nullptr;  // freed with this context (plain, pitched, managed, pinned)
  bool mapped_host = false;        // host/managed: the address is real host memory we allocated
};

struct Driver {
  std::mutex mu;  // guards everything process-local below (never held while sleeping)
  std::atomic<bool> initialized{false};
  std::atomic<bool> forked{false};  // set in a child after fork: CUDA is unusable there
  CUresult init_error = CUDA_SUCCESS;
  Config config;
  StateFile* file = nullptr;
  int32_t proc = -1;
  int pid = 0;
  std::atomic<bool> shut_down{false};
  Context* primary[kMaxDevices] = {};
  int primary_refs[kMaxDevices] = {};
  unsigned primary_flags[kMaxDevices] = {};
  std::vector<Context*> contexts;
  std::vector<int>
      visible;  // CUdevice ordinal -> device index in the state file (CUDA_VISIBLE_DEVICES)
  std::map<uint64_t, Region> regions;  // base -> region
  uint64_t backed_bytes = 0;
  uint64_t next_id = 1;
  // Device virtual address space: reserved PROT_NONE so host dereferences fault, as on hardware.
  uint64_t va_base = 0, va_size = 0;
  std::map<uint64_t, uint64_t> va_free;  // base -> size
};

Driver& driver();

// CUdevice ordinals are positions in CUDA_VISIBLE_DEVICES; the state file,
// contexts and charges use physical device indices.
inline int visible_count() {
  return static_cast<int>(driver().visible.size());
}
inline bool valid_ordinal(CUdevice d) {
  return d >= 0 && d < visible_count();
}
inline int physical(CUdevice ordinal) {
  return driver().visible[static_cast<size_t>(ordinal)];
}
CUdevice ordinal_of(int physical_index);  // -1 when not visible
// Parses CUDA_VISIBLE_DEVICES against the node's UUIDs like the driver:
// indices, GPU-<uuid> or unique UUID prefixes; parsing stops at the first
// invalid entry. Unset means all devices.
std::vector<int> parse_visible_devices(const char* text, const SharedState& s);

// Fails with the init error, NOT_INITIALIZED or DEINITIALIZED where applicable.
CUresult check_ready();
// Current context of the calling thread (nullptr if none).
Context* current_context();
// The current context if work may be done in it: CUDA_ERROR_INVALID_CONTEXT
// without one, CUDA_ERROR_CONTEXT_IS_DESTROYED for a destroyed one or an
// inactive primary context.
CUresult need_context(Context** out);
// Destroys what a context owns (modules, streams, events, arrays, memory), as
// the driver does when the context is destroyed or a primary context reset.
void destroy_context_state(Context* ctx);
// Destroyers of owned objects whose handles take_owned_handles() forgot.
void drop_module(void* module);
void drop_event(void* event);
void drop_array(void* array);
void drop_mipmapped_array(void* mipmap);
void free_owned_regions(const Context* owner);
void set_current(Context* ctx);
std::vector<Context*>& context_stack();

// The context behind a CUcontext argument; nullptr unless it is a live
// context handle (destroyed ones are forgotten by the handle registry).
Context* as_context(CUcontext ctx);
// Whether `ctx` (e.g. a thread's current context) has not been destroyed.
bool context_alive(const Context* ctx);
// The context owning `stream` (its own, or the current one for the NULL,
// legacy and per-thread handles). Writes the Stream object to *out;
// CUDA_ERROR_INVALID_HANDLE for anything but a live stream or a built-in one,
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream while a blocking
// stream of its context is capturing.
CUresult resolve_stream(CUstream stream, Stream** out);
// The same without the capture rule, for the calls that only read a
// stream's fields (its flags, priority, id, context, device).
CUresult resolve_stream_object(CUstream stream, Stream** out);
bool is_builtin_stream(CUstream stream);
// Whether `stream` names the legacy default stream here (the NULL stream
// outside a per-thread twin, or CU_STREAM_LEGACY).
bool names_legacy_stream(CUstream stream);
// A capture of `s` began or ended: counts it for the legacy stream's rule.
void capture_state_changed(Stream* s, bool capturing);

// Appends work to a context's queue, blocking like a full push buffer when the
// queue is at FAKEGPU_QUEUE_DEPTH. Returns the sequence number in *seq.
CUresult submit(Stream* stream, ItemKind kind, uint64_t duration_ns, int32_t slot = -1,
                uint64_t ticket = 0, uint64_t* seq = nullptr);
// The engine's lane for a stream's work: its id, and how the legacy stream's
// barrier orders it.
Lane lane_of(const Stream& stream);
// Sleeps until the context has completed its items through `seq`, of every
// stream or of `stream` alone (simulated time <= now).
CUresult wait_for(Context* ctx, uint64_t seq, const Stream* stream = nullptr);
// Non-blocking: whether they are complete.
CUresult query(Context* ctx, uint64_t seq, const Stream* stream = nullptr);
// Sleeps until the engine reached host function `ticket` of event slot
// `slot`, queued on `stream` as item `seq`: its stream's earlier work, and
// the work the legacy stream's order puts before it, completed.
CUresult wait_host_reached(Context* ctx, const Stream* stream, uint64_t seq, int32_t slot,
                           uint64_t ticket);

// Device address space.
uint64_t va_alloc(uint64_t size, uint64_t alignment);
void va_release(uint64_t base, uint64_t size);
// Finds the region containing [addr, addr+len); nullptr if none.
Region* find_region(uint64_t addr, uint64_t len, uint64_t* base_out = nullptr);
// Host-visible bytes for `len` bytes at region offset; nullptr if unbacked.
uint8_t* backing_bytes(Region& r, uint64_t offset, bool for_write);
// The same for any backing (a CUDA array's texels): a write backs it lazily
// while the process's FAKEGPU_HOST_BACKING lasts. Caller holds driver().mu.
uint8_t* backing_bytes(Backing& b, uint64_t offset, bool for_write);
// Gives a lazily backed Backing's bytes back to the process's budget. Caller
// holds driver().mu.
void release_backing(Backing& b);
// One end of a copy of `bytes` at `addr`: host addresses are used as they are,
// device addresses must lie inside a known region (CUDA_ERROR_INVALID_VALUE);
// *out is nullptr where the memory is unbacked. Caller holds driver().mu.
CUresult copy_end_bytes(uint64_t addr, bool device, uint64_t bytes, bool write, uint8_t** out);

// Device memory charging against the shared capacity (reaps dead processes
// once before giving up).
CUresult charge_device(int device, uint64_t bytes);
void uncharge_device(int device, uint64_t bytes);

// The stream a copy/memset runs on, resolved (with the current context)
// before the transfer touches any byte, so a bad stream changes nothing.
CUresult transfer_stream(CUstream stream, Stream** out);
// Runs a copy/memset whose bytes were moved already: occupies `s` for the
// simulated transfer time; synchronous forms wait for it.
CUresult run_transfer(Stream* s, uint64_t bytes, bool device_local, bool sync);

// Copies with simulated duration; `*_device` tells which sides are device addresses.
uint64_t copy_duration_ns(uint64_t bytes, bool device_local);
CUresult copy_bytes(uint64_t dst, bool dst_device, uint64_t src, bool src_device, uint64_t bytes);
CUresult fill_bytes(uint64_t dst, uint64_t element_size, uint64_t value, uint64_t count,
                    uint64_t pitch, uint64_t width_elements, uint64_t height);

// The function behind a CUfunction (or CUkernel) argument; nullptr unless live.
Function* as_function(CUfunction f);
// Kernel duration from its parameters (spin kernels) or FAKEGPU_KERNEL_NS.
uint64_t kernel_duration_ns(const Function* f, void** params, void** extra);

// Stream-ordered pools give memory above their release threshold back to the
// device at synchronisation points, as the driver does.
void trim_pools_after_sync();

// A call the driver documents as potentially unsafe during a capture (a
// synchronisation, a query of a stream or event): CUDA_SUCCESS where this
// thread may make it, else CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the
// captures that prohibit it are invalidated. Prohibited where this thread
// has a capture under way not begun in the relaxed mode, or (with this
// thread's interaction mode global, the default) another thread has one
// begun in the global mode; a thread in the relaxed interaction mode
// (cuThreadExchangeStreamCaptureMode) is never prohibited.
CUresult unsafe_call_during_captures();
// Whether the capture `s` takes part in was invalidated; invalidates it (a
// synchronisation or query of a capturing stream: "any associated capture
// graphs are invalidated").
bool capture_invalidated(const Stream* s);
void invalidate_capture(Stream* s);

// Capture: records a kernel of `duration_ns` into the stream's graph.
CUresult capture_kernel(Stream* s, uint64_t duration_ns);
CUresult capture_event_record(Stream* s, Event* e);
// cuStreamWaitEvent on an event recorded during a capture.
CUresult capture_wait_event(Stream* s, Event* e);
// Graph memory: stream-ordered allocation under capture becomes an alloc node
// (address assigned now, memory from the device's graph pool at launch).
CUresult capture_alloc(Stream* s, uint64_t bytes, CUdeviceptr* out);
CUresult capture_free(Stream* s, uint64_t ptr);
// A graph allocation freed outside its graph (cuMemFree/cuMemFreeAsync).
void graph_memory_freed(int device, uint64_t bytes);

}  // namespace fakegpu
