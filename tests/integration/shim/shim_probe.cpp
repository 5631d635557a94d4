// shim_probe: drives libcushare.so through the ways real programs reach the
// driver without linking it: dlopen("libcuda.so.1") + dlsym, and
// cuGetProcAddress_v2 / cuGetProcAddress at a chosen cudaVersion and flags.
// Prints one JSON line per mode; exits non-zero when a check made inside the
// process fails (the message says which). Modes:
//   fill      allocate --step until out of memory (or --max), report the
//             cuMemGetInfo_v2 view before/after every step
//   race      --threads threads allocate/free random sizes for --seconds
//   fork      fork children that allocate and exit; check the parent's view
//   resolver  check cuGetProcAddress self-lookup, symbolStatus, unknowns
//   dlsym     check that non-CUDA dlsym (RTLD_DEFAULT, RTLD_NEXT, handles)
//             behaves as without the shim
//   nvml      nvmlDeviceGetMemoryInfo(_v2) and the process list
//   graph     a captured graph's memory refused at launch over the quota
//             (--step: bytes held outside, --max: bytes the graph allocates;
//             --per-thread: captured on the per-thread default stream)
//   replay    every (symbol, cudaVersion, flags) of --lookups resolved
//             through the shim's cuGetProcAddress_v2 and cuGetProcAddress
//             and through the driver's own: a function the driver has is
//             the shim's wrapper of exactly that ABI where the shim hooks it,
//             else the driver's pointer; an unknown one the driver's answer
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "shim_probe: FAILED: %s\n", what.c_str());
  std::fflush(stderr);
  std::exit(3);
}

void expect(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

// The driver functions the probe uses, resolved one of several ways.
struct Api {
  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*CtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*MemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*MemFree)(CUdeviceptr) = nullptr;
  CUresult (*MemGetInfo)(size_t*, size_t*) = nullptr;
  CUresult (*DeviceTotalMem)(size_t*, CUdevice) = nullptr;
  CUresult (*GetErrorName)(CUresult, const char**) = nullptr;
};

void* g_libcuda = nullptr;

void* open_libcuda() {
  if (!g_libcuda) g_libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!g_libcuda) fail(std::string("dlopen(libcuda.so.1): ") + dlerror());
  return g_libcuda;
}

template <class Fn>
void by_dlsym(Fn& out, const char* name) {
  out = reinterpret_cast<Fn>(dlsym(open_libcuda(), name));
  if (!out) fail(std::string("dlsym(libcuda, ") + name + ") = NULL");
}

using GetProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t,
                               CUdriverProcAddressQueryResult*);
using GetProcV1 = CUresult (*)(const char*, void**, int, cuuint64_t);

struct Resolver {
  std::string how = "dlsym";  // dlsym | procaddr | procaddr4
  int version = 12000;
  cuuint64_t flags = 0;

  template <class Fn>
  void get(Fn& out, const char* base, const char* versioned) const {
    if (how == "dlsym") return by_dlsym(out, versioned);
    void* p = nullptr;
    CUresult r;
    if (how == "procaddr4") {
      GetProcV1 gpa;
      by_dlsym(gpa, "cuGetProcAddress");
      r = gpa(base, &p, version, flags);
    } else {
      GetProcV2 gpa;
      by_dlsym(gpa, "cuGetProcAddress_v2");
      CUdriverProcAddressQueryResult status{};
      r = gpa(base, &p, version, flags, &status);
      if (r == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS)
        fail(std::string("symbolStatus for ") + base + " = " + std::to_string(status));
    }
    if (r != CUDA_SUCCESS || !p)
      fail(std::string("cuGetProcAddress(") + base + ", " + std::to_string(version) + ", " +
           std::to_string(flags) + ") = " + std::to_string(r));
    out = reinterpret_cast<Fn>(p);
  }

  Api load() const {
    Api a;
    get(a.Init, "cuInit", "cuInit");
    get(a.DeviceGet, "cuDeviceGet", "cuDeviceGet");
    get(a.PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
    get(a.CtxSetCurrent, "cuCtxSetCurrent", "cuCtxSetCurrent");
    get(a.MemAlloc, "cuMemAlloc", "cuMemAlloc_v2");
    get(a.MemFree, "cuMemFree", "cuMemFree_v2");
    get(a.MemGetInfo, "cuMemGetInfo", "cuMemGetInfo_v2");
    get(a.DeviceTotalMem, "cuDeviceTotalMem", "cuDeviceTotalMem_v2");
    get(a.GetErrorName, "cuGetErrorName", "cuGetErrorName");
    return a;
  }
};

std::string name_of(const Api& a, CUresult r) {
  const char* n = nullptr;
  if (a.GetErrorName && a.GetErrorName(r, &n) == CUDA_SUCCESS && n) return n;
  return "CUresult(" + std::to_string(r) + ")";
}

// cuInit + primary context of device 0. Returns false (and prints the
// error as JSON) when cuInit fails: the bad-configuration tests expect that.
bool start(const Api& a, CUdevice& dev) {
  const CUresult r = a.Init(0);
  if (r != CUDA_SUCCESS) {
    std::printf("%s\n", json{{"init", name_of(a, r)}}.dump().c_str());
    return false;
  }
  expect(a.DeviceGet(&dev, 0) == CUDA_SUCCESS, "cuDeviceGet");
  CUcontext ctx;
  expect(a.PrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS, "cuDevicePrimaryCtxRetain");
  expect(a.CtxSetCurrent(ctx) == CUDA_SUCCESS, "cuCtxSetCurrent");
  return true;
}

int mode_fill(const Api& a, std::uint64_t step, std::uint64_t max) {
  CUdevice dev;
  if (!start(a, dev)) return 0;
  size_t free0 = 0, total0 = 0, device_total = 0;
  expect(a.MemGetInfo(&free0, &total0) == CUDA_SUCCESS, "cuMemGetInfo_v2");
  expect(a.DeviceTotalMem(&device_total, dev) == CUDA_SUCCESS, "cuDeviceTotalMem_v2");
  // NULL outputs are allowed (OptiX passes free = NULL).
  size_t t = 0;
  expect(a.MemGetInfo(nullptr, &t) == CUDA_SUCCESS && t == total0, "cuMemGetInfo_v2(NULL, &t)");
  expect(a.MemGetInfo(&t, nullptr) == CUDA_SUCCESS, "cuMemGetInfo_v2(&f, NULL)");
  std::vector<CUdeviceptr> held;
  std::uint64_t obtained = 0;
  size_t prev_free = free0;
  CUresult last = CUDA_SUCCESS;
  bool exact = true;
  while (!max || obtained + step <= max) {
    CUdeviceptr p = 0;
    last = a.MemAlloc(&p, step);
    if (last != CUDA_SUCCESS) break;
    held.push_back(p);
    obtained += step;
    size_t f = 0, tt = 0;
    expect(a.MemGetInfo(&f, &tt) == CUDA_SUCCESS, "cuMemGetInfo_v2");
    if (prev_free - f != step) exact = false;
    prev_free = f;
  }
  size_t free1 = 0, total1 = 0;
  expect(a.MemGetInfo(&free1, &total1) == CUDA_SUCCESS, "cuMemGetInfo_v2");
  for (auto p : held) expect(a.MemFree(p) == CUDA_SUCCESS, "cuMemFree_v2");
  size_t free2 = 0, total2 = 0;
  expect(a.MemGetInfo(&free2, &total2) == CUDA_SUCCESS, "cuMemGetInfo_v2");
  std::printf("%s\n", json{{"bytes", obtained},
                           {"result", name_of(a, last)},
                           {"total", total0},
                           {"device_total", device_total},
                           {"free_before", free0},
                           {"free_full", free1},
                           {"free_after_free", free2},
                           {"free_shrinks_exactly", exact}}
                          .dump()
                          .c_str());
  return 0;
}

int mode_race(const Api& a, unsigned threads, double seconds, std::uint64_t max_step, unsigned seed,
              double start_at) {
  CUdevice dev;
  if (!start(a, dev)) return 0;
  // Racing processes start together once every one has its context.
  if (start_at > 0) {
    const auto now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (start_at > now) std::this_thread::sleep_for(std::chrono::duration<double>(start_at - now));
  }
  CUcontext ctx = nullptr;
  {
    CUresult (*get_current)(CUcontext*);
    by_dlsym(get_current, "cuCtxGetCurrent");
    get_current(&ctx);
  }
  std::atomic<std::uint64_t> allocs{0}, refusals{0};
  std::vector<std::thread> pool;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      a.CtxSetCurrent(ctx);
      std::mt19937_64 rng(seed * 1000 + t);
      std::vector<CUdeviceptr> mine;
      while (std::chrono::steady_clock::now() < until) {
        if (mine.empty() || rng() % 3) {
          CUdeviceptr p = 0;
          const size_t sz = 1 + rng() % max_step;
          const CUresult r = a.MemAlloc(&p, sz);
          if (r == CUDA_SUCCESS) {
            mine.push_back(p);
            ++allocs;
          } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            ++refusals;
          } else {
            fail("cuMemAlloc_v2 in race: " + name_of(a, r));
          }
        } else {
          const size_t i = rng() % mine.size();
          expect(a.MemFree(mine[i]) == CUDA_SUCCESS, "cuMemFree_v2 in race");
          mine[i] = mine.back();
          mine.pop_back();
        }
      }
      for (auto p : mine) a.MemFree(p);
    });
  }
  for (auto& th : pool) th.join();
  std::printf("%s\n",
              json{{"allocs", allocs.load()}, {"refusals", refusals.load()}}.dump().c_str());
  return 0;
}

// fork(): children of a process that has not initialised CUDA initialise
// on their own and are charged to their own slots (returned at their exit);
// children forked after the parent initialised (they cannot use CUDA, as on
// a real driver) must not release or disturb the parent's slot when they exit.
int run_children(unsigned n, const std::function<int()>& body) {
  for (unsigned i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) std::exit(body());
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return static_cast<int>(i) + 1;
  }
  return 0;
}

int mode_fork(const Api& a, std::uint64_t step, unsigned children) {
  const int before_init = run_children(children, [&] {
    CUdevice d;
    if (!start(a, d)) return 10;
    CUdeviceptr p = 0;
    return a.MemAlloc(&p, step) == CUDA_SUCCESS ? 0 : 11;  // exits without freeing
  });
  expect(before_init == 0, "child " + std::to_string(before_init) + " before parent init failed");
  CUdevice dev;
  if (!start(a, dev)) return 0;
  CUdeviceptr mine = 0;
  expect(a.MemAlloc(&mine, step) == CUDA_SUCCESS, "parent cuMemAlloc_v2");
  size_t free_before = 0, total = 0;
  expect(a.MemGetInfo(&free_before, &total) == CUDA_SUCCESS, "cuMemGetInfo_v2");
  const int after_init = run_children(children, [] { return 0; });  // exit() runs atexit
  expect(after_init == 0, "child after parent init failed");
  size_t free_after = 0;
  expect(a.MemGetInfo(&free_after, &total) == CUDA_SUCCESS, "cuMemGetInfo_v2");
  expect(a.MemFree(mine) == CUDA_SUCCESS, "parent cuMemFree_v2");
  std::printf("%s\n", json{{"free_before", free_before},
                           {"free_after", free_after},
                           {"total", total},
                           {"children", children}}
                          .dump()
                          .c_str());
  return 0;
}

// Mipmapped arrays (reached through dlsym): charged with the driver's own
// memory requirement, refused at the quota, returned at destroy.
int mode_mipmap(const Api& a) {
  CUdevice dev;
  if (!start(a, dev)) return 0;
  CUresult (*create)(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned);
  CUresult (*destroy)(CUmipmappedArray);
  by_dlsym(create, "cuMipmappedArrayCreate");
  by_dlsym(destroy, "cuMipmappedArrayDestroy");
  size_t free0 = 0, total = 0;
  expect(a.MemGetInfo(&free0, &total) == CUDA_SUCCESS, "cuMemGetInfo_v2");
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = 8192;
  d.Height = 8192;
  d.Format = CU_AD_FORMAT_FLOAT;
  d.NumChannels = 4;  // 1 GiB base level
  std::vector<CUmipmappedArray> held;
  CUresult last = CUDA_SUCCESS;
  for (;;) {
    CUmipmappedArray m = nullptr;
    last = create(&m, &d, 4);
    if (last != CUDA_SUCCESS) break;
    held.push_back(m);
  }
  size_t free1 = 0;
  expect(a.MemGetInfo(&free1, &total) == CUDA_SUCCESS, "cuMemGetInfo_v2");
  for (auto m : held) expect(destroy(m) == CUDA_SUCCESS, "cuMipmappedArrayDestroy");
  size_t free2 = 0;
  expect(a.MemGetInfo(&free2, &total) == CUDA_SUCCESS, "cuMemGetInfo_v2");
  std::printf("%s\n", json{{"arrays", held.size()},
                           {"result", name_of(a, last)},
                           {"total", total},
                           {"free_before", free0},
                           {"free_full", free1},
                           {"free_after_free", free2}}
                          .dump()
                          .c_str());
  return 0;
}

// Graph memory: a captured graph allocates `graph_bytes` (stream-ordered
// allocation inside the capture) while the process holds `hold` bytes. The
// first launch must be refused when the two do not fit the quota, before
// the driver grows its graph pool; after the held memory is freed the same
// executable launches. With `per_thread`, as a program built for per-thread
// default streams does it: the _ptsz entry points on the NULL stream.
// The graph of mode_graph, with one allocation of `bytes` made as `how` says:
//   capture       cuMemAllocAsync (then cuMemFreeAsync) captured on `s`;
//   joined        the same on a second stream that joined the capture by
//                 waiting on an event recorded in it (a fork and a join);
//   alloc-node    cuGraphAddMemAllocNode into a graph of its own (the
//                 allocation outlives the launch: no free node);
//   add-node      cuGraphAddNode_v2 (CUDA 12.3's ABI) with an allocation node;
//   add-node-12020  cuGraphAddNode, the 12.2 ABI without edge data.
CUgraph graph_with_allocation(const std::string& how, CUstream s, CUdevice dev, std::uint64_t bytes,
                              bool per_thread) {
  CUresult (*stream_create)(CUstream*, unsigned);
  CUresult (*begin)(CUstream, CUstreamCaptureMode);
  CUresult (*end)(CUstream, CUgraph*);
  CUresult (*alloc_async)(CUdeviceptr*, size_t, CUstream);
  CUresult (*free_async)(CUdeviceptr, CUstream);
  by_dlsym(stream_create, "cuStreamCreate");
  const std::string ptsz = per_thread ? "_ptsz" : "";
  by_dlsym(begin, ("cuStreamBeginCapture_v2" + ptsz).c_str());
  by_dlsym(end, ("cuStreamEndCapture" + ptsz).c_str());
  by_dlsym(alloc_async, ("cuMemAllocAsync" + ptsz).c_str());
  by_dlsym(free_async, ("cuMemFreeAsync" + ptsz).c_str());
  CUgraph g = nullptr;
  if (how == "capture" || how == "joined") {
    expect(begin(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS, "cuStreamBeginCapture_v2");
    CUstream on = s;
    CUresult (*event_create)(CUevent*, unsigned);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*wait_event)(CUstream, CUevent, unsigned);
    by_dlsym(event_create, "cuEventCreate");
    by_dlsym(event_record, "cuEventRecord");
    by_dlsym(wait_event, "cuStreamWaitEvent");
    CUevent fork = nullptr, join = nullptr;
    if (how == "joined") {
      expect(stream_create(&on, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "cuStreamCreate");
      expect(event_create(&fork, 0) == CUDA_SUCCESS && event_create(&join, 0) == CUDA_SUCCESS,
             "cuEventCreate");
      expect(event_record(fork, s) == CUDA_SUCCESS, "cuEventRecord (fork)");
      expect(wait_event(on, fork, 0) == CUDA_SUCCESS, "cuStreamWaitEvent (fork)");
    }
    CUdeviceptr p = 0;
    expect(alloc_async(&p, bytes, on) == CUDA_SUCCESS, "captured cuMemAllocAsync");
    expect(free_async(p, on) == CUDA_SUCCESS, "captured cuMemFreeAsync");
    if (how == "joined") {
      expect(event_record(join, on) == CUDA_SUCCESS, "cuEventRecord (join)");
      expect(wait_event(s, join, 0) == CUDA_SUCCESS, "cuStreamWaitEvent (join)");
    }
    expect(end(s, &g) == CUDA_SUCCESS, "cuStreamEndCapture");
    return g;
  }
  CUresult (*graph_create)(CUgraph*, unsigned);
  by_dlsym(graph_create, "cuGraphCreate");
  expect(graph_create(&g, 0) == CUDA_SUCCESS, "cuGraphCreate");
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  CUgraphNode node = nullptr;
  if (how == "alloc-node") {
    CUresult (*add)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUDA_MEM_ALLOC_NODE_PARAMS*);
    by_dlsym(add, "cuGraphAddMemAllocNode");
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    params.poolProps = props;
    params.bytesize = bytes;
    expect(add(&node, g, nullptr, 0, &params) == CUDA_SUCCESS, "cuGraphAddMemAllocNode");
    return g;
  }
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  params.alloc.poolProps = props;
  params.alloc.bytesize = bytes;
  if (how == "add-node") {
    CUresult (*add)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
                    CUgraphNodeParams*);
    by_dlsym(add, "cuGraphAddNode_v2");
    expect(add(&node, g, nullptr, nullptr, 0, &params) == CUDA_SUCCESS, "cuGraphAddNode_v2");
  } else {
    CUresult (*add)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);
    by_dlsym(add, "cuGraphAddNode");
    expect(add(&node, g, nullptr, 0, &params) == CUDA_SUCCESS, "cuGraphAddNode");
  }
  return g;
}

int mode_graph(const Api& a, std::uint64_t hold, std::uint64_t graph_bytes, bool per_thread,
               const std::string& how) {
  CUdevice dev;
  if (!start(a, dev)) return 0;
  CUresult (*stream_create)(CUstream*, unsigned);
  CUresult (*instantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*launch)(CUgraphExec, CUstream);
  CUresult (*sync)(CUstream);
  by_dlsym(stream_create, "cuStreamCreate");
  const std::string ptsz = per_thread ? "_ptsz" : "";
  by_dlsym(instantiate, "cuGraphInstantiateWithFlags");
  by_dlsym(launch, ("cuGraphLaunch" + ptsz).c_str());
  by_dlsym(sync, ("cuStreamSynchronize" + ptsz).c_str());
  auto view = [&] {
    size_t free = 0, total = 0;
    expect(a.MemGetInfo(&free, &total) == CUDA_SUCCESS, "cuMemGetInfo_v2");
    return free;
  };
  CUstream s = nullptr;  // with per_thread: the thread's default stream
  if (!per_thread)
    expect(stream_create(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "cuStreamCreate");
  const size_t free_before = view();
  CUdeviceptr held = 0;
  expect(a.MemAlloc(&held, hold) == CUDA_SUCCESS, "cuMemAlloc_v2 (held)");
  const CUgraph g = graph_with_allocation(how, s, dev, graph_bytes, per_thread);
  CUgraphExec exec = nullptr;
  expect(instantiate(&exec, g, 0) == CUDA_SUCCESS, "cuGraphInstantiateWithFlags");
  const CUresult first = launch(exec, s);
  expect(sync(s) == CUDA_SUCCESS, "cuStreamSynchronize");
  const size_t free_after_first = view();
  expect(a.MemFree(held) == CUDA_SUCCESS, "cuMemFree_v2 (held)");
  const CUresult second = launch(exec, s);
  expect(sync(s) == CUDA_SUCCESS, "cuStreamSynchronize");
  const size_t free_after_second = view();
  std::printf("%s\n", json{{"first", name_of(a, first)},
                           {"second", name_of(a, second)},
                           {"free_before", free_before},
                           {"free_after_first", free_after_first},
                           {"free_after_second", free_after_second}}
                          .dump()
                          .c_str());
  return 0;
}

// Prints the cuMemGetInfo_v2 view every 200 ms for --seconds.
int mode_watch(const Api& a, double seconds) {
  CUdevice dev;
  if (!start(a, dev)) return 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    size_t free = 0, total = 0;
    expect(a.MemGetInfo(&free, &total) == CUDA_SUCCESS, "cuMemGetInfo_v2");
    std::printf("%s\n", json{{"free", free}, {"total", total}}.dump().c_str());
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return 0;
}

// The driver's own function `name`, past the shim: glibc's dlsym (the shim
// hooks the public one) on the libcuda.so.1 handle.
void* driver_symbol(const char* name) {
  using DlsymFn = void* (*)(void*, const char*);
  static auto glibc_dlsym = [] {
    auto f = reinterpret_cast<DlsymFn>(dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34"));
    if (!f) f = reinterpret_cast<DlsymFn>(dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5"));
    return f;
  }();
  expect(glibc_dlsym != nullptr, "glibc's dlsym");
  return glibc_dlsym(open_libcuda(), name);
}

int mode_replay(const std::string& lookups) {
  std::ifstream in(lookups);
  expect(in.good(), "open " + lookups);
  void* h = open_libcuda();
  auto shim2 = reinterpret_cast<GetProcV2>(dlsym(h, "cuGetProcAddress_v2"));
  auto shim1 = reinterpret_cast<GetProcV1>(dlsym(h, "cuGetProcAddress"));
  auto drv2 = reinterpret_cast<GetProcV2>(driver_symbol("cuGetProcAddress_v2"));
  auto drv1 = reinterpret_cast<GetProcV1>(driver_symbol("cuGetProcAddress"));
  expect(shim2 && shim1 && drv2 && drv1, "both resolvers of both ABIs");
  expect(reinterpret_cast<void*>(shim2) != reinterpret_cast<void*>(drv2),
         "cuGetProcAddress_v2 through libcuda is the shim's");
  // The shim's exports, by name: what it hooks.
  Dl_info self{};
  expect(dladdr(reinterpret_cast<void*>(shim2), &self) && self.dli_fname, "dladdr(shim)");
  void* shim = dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  expect(shim != nullptr, std::string("dlopen(") + self.dli_fname + ", RTLD_NOLOAD)");
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(h, "cuInit"));
  expect(init && init(0) == CUDA_SUCCESS, "cuInit");
  int lines = 0, hooked = 0, passed = 0, unknown = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, flag_text;
    int version = 0;
    if (!(std::getline(fields, name, '\t') && fields >> version >> flag_text))
      fail("bad line: " + line);
    const cuuint64_t flags = std::stoull(flag_text, nullptr, 0);  // "0" or "0x2"
    if (name == "(empty)") name.clear();
    ++lines;
    const std::string what =
        "'" + name + "' @" + std::to_string(version) + " flags " + std::to_string(flags);
    void* dp = nullptr;
    void* sp = reinterpret_cast<void*>(1);
    CUdriverProcAddressQueryResult ds{}, ss{};
    const CUresult dr = drv2(name.c_str(), &dp, version, flags, &ds);
    const CUresult sr = shim2(name.c_str(), &sp, version, flags, &ss);
    void* dp1 = nullptr;
    void* sp1 = reinterpret_cast<void*>(1);
    const CUresult dr1 = drv1(name.c_str(), &dp1, version, flags);
    const CUresult sr1 = shim1(name.c_str(), &sp1, version, flags);
    expect(sr == dr && ss == ds, what + ": status differs from the driver's (" +
                                     std::to_string(sr) + "/" + std::to_string(ss) + " vs " +
                                     std::to_string(dr) + "/" + std::to_string(ds) + ")");
    expect(sr1 == dr1, what + ": cuGetProcAddress result differs from the driver's");
    if (dr != CUDA_SUCCESS || dp == nullptr) {
      expect(sp == nullptr || sr != CUDA_SUCCESS, what + ": a pointer the driver does not give");
      expect(dp1 == nullptr && (sp1 == nullptr || sr1 != CUDA_SUCCESS),
             what + ": cuGetProcAddress gives a pointer the driver does not");
      ++unknown;
      continue;
    }
    expect(dp1 == dp, what + ": the driver's two resolvers disagree");
    // The ABI the driver chose, by the name its implementation is exported under.
    Dl_info info{};
    expect(dladdr(dp, &info) && info.dli_sname, what + ": dladdr of the driver's pointer");
    void* wrapper = dlsym(shim, info.dli_sname);
    if (wrapper != nullptr) {
      expect(sp == wrapper, what + ": not the shim's " + info.dli_sname);
      expect(sp1 == wrapper, what + ": cuGetProcAddress: not the shim's " + info.dli_sname);
      ++hooked;
    } else {
      expect(sp == dp, what + ": not the driver's own " + info.dli_sname);
      expect(sp1 == dp, what + ": cuGetProcAddress: not the driver's own " + info.dli_sname);
      ++passed;
    }
  }
  expect(lines > 0, "no lookups in " + lookups);
  std::printf("%s\n",
              json{{"lookups", lines}, {"hooked", hooked}, {"driver", passed}, {"unknown", unknown}}
                  .dump()
                  .c_str());
  return 0;
}

int mode_resolver() {
  void* h = open_libcuda();
  GetProcV2 gpa2 = reinterpret_cast<GetProcV2>(dlsym(h, "cuGetProcAddress_v2"));
  GetProcV1 gpa1 = reinterpret_cast<GetProcV1>(dlsym(h, "cuGetProcAddress"));
  expect(gpa2 && gpa1, "dlsym cuGetProcAddress(_v2)");
  // Both come from the shim: dlsym through a libcuda handle returns the wrappers.
  Dl_info info{};
  expect(dladdr(reinterpret_cast<void*>(gpa2), &info) && info.dli_fname &&
             std::strstr(info.dli_fname, "libcushare"),
         "dlsym(libcuda, cuGetProcAddress_v2) is not the shim's");
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  // Self-lookup returns the shim's resolver of the matching ABI.
  expect(gpa2("cuGetProcAddress", &p, 12000, 0, &status) == CUDA_SUCCESS &&
             p == reinterpret_cast<void*>(gpa2) && status == CU_GET_PROC_ADDRESS_SUCCESS,
         "self-lookup at 12000 -> cuGetProcAddress_v2 wrapper");
  expect(gpa2("cuGetProcAddress", &p, 11030, 0, &status) == CUDA_SUCCESS &&
             p == reinterpret_cast<void*>(gpa1),
         "self-lookup at 11030 -> cuGetProcAddress wrapper");
  // Unknown names pass through: success, NULL, SYMBOL_NOT_FOUND.
  p = reinterpret_cast<void*>(1);
  expect(gpa2("cuNoSuchFunction", &p, 12000, 0, &status) == CUDA_SUCCESS && p == nullptr &&
             status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
         "unknown symbol passes through");
  // Exact ABI by version: cuMemAlloc at 3020+ is the shim's cuMemAlloc_v2;
  // the per-thread flag selects the _ptsz wrapper where one exists.
  void* alloc_v2 = dlsym(h, "cuMemAlloc_v2");
  expect(gpa2("cuMemAlloc", &p, 12000, 0, &status) == CUDA_SUCCESS && p == alloc_v2,
         "cuMemAlloc@12000 -> shim cuMemAlloc_v2");
  expect(gpa2("cuMemAlloc", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status) ==
                 CUDA_SUCCESS &&
             p == alloc_v2,
         "cuMemAlloc@12000 flags 2 -> shim cuMemAlloc_v2 (no _ptsz form)");
  void* launch = dlsym(h, "cuLaunchKernel");
  void* launch_ptsz = dlsym(h, "cuLaunchKernel_ptsz");
  expect(launch && launch_ptsz && launch != launch_ptsz, "cuLaunchKernel(_ptsz) exported");
  expect(gpa2("cuLaunchKernel", &p, 12000, 0, &status) == CUDA_SUCCESS && p == launch,
         "cuLaunchKernel flags 0 -> legacy wrapper");
  expect(gpa2("cuLaunchKernel", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
              &status) == CUDA_SUCCESS &&
             p == launch_ptsz,
         "cuLaunchKernel flags 2 -> _ptsz wrapper");
  void* async_ptsz = dlsym(h, "cuMemAllocAsync_ptsz");
  expect(gpa2("cuMemAllocAsync", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
              &status) == CUDA_SUCCESS &&
             p == async_ptsz,
         "cuMemAllocAsync flags 2 -> _ptsz wrapper");
  // Functions the shim does not hook come back as the driver's own.
  void* real_get_device = dlsym(h, "cuCtxGetDevice");
  expect(gpa2("cuCtxGetDevice", &p, 12000, 0, &status) == CUDA_SUCCESS && p == real_get_device,
         "unhooked cuCtxGetDevice passes through");
  std::printf("%s\n", json{{"resolver", "ok"}}.dump().c_str());
  return 0;
}

int mode_dlsym() {
  // RTLD_DEFAULT and RTLD_NEXT for ordinary names behave as without the shim.
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  expect(libc != nullptr, "libc handle");
  expect(dlsym(RTLD_DEFAULT, "getpid") == dlsym(libc, "getpid"), "RTLD_DEFAULT getpid");
  expect(dlsym(RTLD_NEXT, "getpid") == dlsym(libc, "getpid"), "RTLD_NEXT getpid");
  void* libm = dlopen("libm.so.6", RTLD_NOW);
  expect(libm && dlsym(libm, "cos") != nullptr, "dlsym(libm, cos)");
  expect(dlsym(libm, "no_such_symbol_cushare") == nullptr && dlerror() != nullptr,
         "missing symbol gives NULL and dlerror");
  // A cu* name a handle does not provide stays NULL (the caller's handle counts).
  expect(dlsym(libm, "cuMemAlloc_v2") == nullptr, "dlsym(libm, cuMemAlloc_v2) is NULL");
  // Repeated RTLD_NEXT lookups keep working (HAMi PR #279). The next malloc
  // after this program is the first in the global scope: libc's, or a
  // sanitizer runtime's when one is loaded ahead of libc.
  void* first_malloc = dlsym(RTLD_DEFAULT, "malloc");
  expect(first_malloc != nullptr, "RTLD_DEFAULT malloc");
  for (int i = 0; i < 1000; ++i)
    expect(dlsym(RTLD_NEXT, "malloc") == first_malloc, "repeated RTLD_NEXT malloc");
  std::printf("%s\n", json{{"dlsym", "ok"}}.dump().c_str());
  return 0;
}

int mode_nvml(const Api& a) {
  CUdevice dev;
  if (!start(a, dev)) return 0;
  CUdeviceptr p = 0;
  expect(a.MemAlloc(&p, 512ull << 20) == CUDA_SUCCESS, "cuMemAlloc_v2");
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!nvml) fail(std::string("dlopen(libnvidia-ml.so.1): ") + dlerror());
  using Init = int (*)();
  using Handle = int (*)(unsigned, void**);
  struct Memory {
    unsigned long long total, free, used;
  };
  struct ProcessInfo {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
  };
  using MemInfo = int (*)(void*, Memory*);
  using Procs = int (*)(void*, unsigned*, ProcessInfo*);
  auto init = reinterpret_cast<Init>(dlsym(nvml, "nvmlInit_v2"));
  auto handle = reinterpret_cast<Handle>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  auto meminfo = reinterpret_cast<MemInfo>(dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
  auto procs = reinterpret_cast<Procs>(dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"));
  expect(init && handle && meminfo && procs, "NVML symbols");
  expect(init() == 0, "nvmlInit_v2");
  void* d = nullptr;
  expect(handle(0, &d) == 0, "nvmlDeviceGetHandleByIndex_v2");
  Memory m{};
  expect(meminfo(d, &m) == 0, "nvmlDeviceGetMemoryInfo");
  ProcessInfo infos[64];
  unsigned n = 64;
  const int prc = procs(d, &n, infos);
  json pids = json::array();
  for (unsigned i = 0; prc == 0 && i < n; ++i) pids.push_back(infos[i].pid);
  std::printf("%s\n", json{{"total", m.total},
                           {"free", m.free},
                           {"used", m.used},
                           {"procs_result", prc},
                           {"pids", pids},
                           {"self", getpid()}}
                          .dump()
                          .c_str());
  a.MemFree(p);
  return 0;
}

}  // namespace

// An exception (a bad argument CLI11 lets through, a JSON error) fails the
// probe with its message, like any other failure, not with an abort.
int main(int argc, char** argv) try {
  std::string mode = "fill";
  Resolver res;
  std::uint64_t step = 256ull << 20, max = 0, max_step = 64ull << 20;
  unsigned threads = 4, children = 2, seed = 1;
  double seconds = 1.0, start_at = 0;
  bool per_thread = false;
  std::string lookups;
  CLI::App app{"Drive libcushare.so through dlsym and cuGetProcAddress"};
  app.add_option("--mode", mode)
      ->check(CLI::IsMember({"fill", "race", "fork", "resolver", "dlsym", "nvml", "mipmap", "watch",
                             "graph", "replay"}));
  app.add_option("--resolve", res.how, "dlsym | procaddr | procaddr4")
      ->check(CLI::IsMember({"dlsym", "procaddr", "procaddr4"}));
  app.add_option("--version", res.version, "cudaVersion for cuGetProcAddress");
  app.add_option("--flags", res.flags, "flags for cuGetProcAddress");
  app.add_option("--step", step, "bytes per allocation");
  app.add_option("--max", max, "stop after this many bytes (0 = until out of memory)");
  app.add_option("--max-step", max_step, "race: largest allocation");
  app.add_option("--threads", threads);
  app.add_option("--seconds", seconds);
  app.add_option("--children", children);
  app.add_option("--seed", seed);
  app.add_option("--lookups", lookups, "replay: symbol<TAB>cudaVersion<TAB>flags per line");
  app.add_flag("--per-thread", per_thread, "graph: the _ptsz calls on the NULL stream");
  std::string graph_via = "capture";
  app.add_option("--graph-via", graph_via, "graph: how its allocation node is made")
      ->check(CLI::IsMember({"capture", "joined", "alloc-node", "add-node", "add-node-12020"}));
  app.add_option("--start-at", start_at, "race: unix time at which to start (after init)");
  CLI11_PARSE(app, argc, argv);

  if (mode == "resolver") return mode_resolver();
  if (mode == "replay") return mode_replay(lookups);
  if (mode == "dlsym") return mode_dlsym();
  const Api a = res.load();
  if (mode == "fill") return mode_fill(a, step, max);
  if (mode == "race") return mode_race(a, threads, seconds, max_step, seed, start_at);
  if (mode == "fork") return mode_fork(a, step, children);
  if (mode == "mipmap") return mode_mipmap(a);
  if (mode == "watch") return mode_watch(a, seconds);
  if (mode == "graph") return mode_graph(a, step, max, per_thread, graph_via);
  return mode_nvml(a);
} catch (const std::exception& e) {
  fail(e.what());
}
