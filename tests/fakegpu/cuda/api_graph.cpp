// Stream capture and graphs. A graph is a sequence of timed nodes; launching
// it submits them in order on the stream (dependencies are not modelled: a
// graph's kernels never overlap each other).
#include <algorithm>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tests/fakegpu/cuda/driver.hpp"

using namespace fakegpu;

namespace fakegpu {

struct GraphNode {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  uint64_t duration_ns = 0;
};

struct Graph {
  std::vector<GraphNode*> nodes;
  int device = -1;                      // physical device of its memory nodes
  std::map<uint64_t, uint64_t> allocs;  // alloc node address -> bytes (2 MiB granules)
  uint64_t peak_bytes = 0;              // graph-pool memory a launch needs
  uint64_t unfreed_bytes = 0;           // allocations the graph does not free itself
};

struct GraphExec {
  std::vector<uint64_t> kernels;  // durations, in order
  int device = -1;
  uint64_t peak_bytes = 0;
  uint64_t unfreed_bytes = 0;
  std::map<uint64_t, uint64_t> unfreed;  // address -> bytes: left for the program to free
  bool auto_free = false;                // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
  bool launched = false;                 // before: its addresses are capture placeholders
};

}  // namespace fakegpu

namespace {

thread_local CUstreamCaptureMode tls_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

// The captures under way in the process (their origin streams), for the
// rule on potentially unsafe calls.
struct ActiveCapture {
  Stream* origin;
  CUstreamCaptureMode mode;
  std::thread::id owner;
  bool builtin;  // a per-thread default stream: no handle of its own
};
std::mutex& captures_mutex() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::vector<ActiveCapture>& active_captures() {
  static auto* v = new std::vector<ActiveCapture>();
  return *v;
}

// The device graph memory pool (per process, as in the driver): launches
// grow it to what they need; it keeps its memory until cuDeviceGraphMemTrim.
struct GraphPool {
  uint64_t reserved = 0, used = 0, reserved_high = 0, used_high = 0;
};
GraphPool graph_pools[kMaxDevices];

constexpr uint64_t kGraphGranule = 2ull << 20;

CUresult reserve_graph_memory(int device, uint64_t peak, uint64_t unfreed) {
  Driver& d = driver();
  uint64_t grow = 0;
  {
    std::lock_guard<std::mutex> guard(d.mu);
    GraphPool& p = graph_pools[device];
    if (p.used + peak > p.reserved) grow = p.used + peak - p.reserved;
  }
  if (grow) {
    if (CUresult r = charge_device(device, grow); r != CUDA_SUCCESS) return r;
  }
  std::lock_guard<std::mutex> guard(d.mu);
  GraphPool& p = graph_pools[device];
  p.reserved += grow;
  p.used += unfreed;  // allocations left for the program to free
  p.reserved_high = std::max(p.reserved_high, p.reserved);
  p.used_high = std::max(p.used_high, p.used + peak - unfreed);
  return CUDA_SUCCESS;
}
std::atomic<uint64_t> next_capture_id{1};

// Graph handles that are not live are CUDA_ERROR_INVALID_VALUE: the only
// error the graph API documents for a bad argument.
Graph* as_graph(CUgraph g) {
  return handle_object<Graph>(g, HandleKind::graph);
}

GraphExec* as_exec(CUgraphExec g) {
  return handle_object<GraphExec>(g, HandleKind::graph_exec);
}

Graph* new_graph() {
  auto* g = new Graph();
  register_handle(g, HandleKind::graph);
  return g;
}

GraphNode* add_node(Graph* g, CUgraphNodeType type, uint64_t ns) {
  auto* node = new GraphNode();
  node->type = type;
  node->duration_ns = ns;
  g->nodes.push_back(node);
  register_handle(node, HandleKind::graph_node);
  return node;
}

CUresult begin_capture(CUstream hStream, CUstreamCaptureMode mode) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  // A per-thread default stream may be captured; the legacy one may not.
  if (names_legacy_stream(hStream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hStream, &s); r != CUDA_SUCCESS) return r;
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  s->graph = new_graph();
  s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  capture_state_changed(s, true);
  s->capture_mode = mode;
  s->capture_id = next_capture_id++;
  s->capture_invalidated = false;
  std::lock_guard<std::mutex> guard(captures_mutex());
  active_captures().push_back({s, mode, std::this_thread::get_id(), is_builtin_stream(hStream)});
  return CUDA_SUCCESS;
}

void forget_capture(Stream* origin) {
  std::lock_guard<std::mutex> guard(captures_mutex());
  std::erase_if(active_captures(), [&](const ActiveCapture& c) { return c.origin == origin; });
}

CUresult end_capture(CUstream hStream, CUgraph* phGraph) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hStream, &s); r != CUDA_SUCCESS) return r;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  if (s->capture_origin) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;  // only the origin ends it
  // Every joined stream's captured work must lead into the origin.
  bool unjoined = false;
  for (Stream* j : s->capture_joined) {
    if (j->capture_joined_ops < j->capture_ops) unjoined = true;
    j->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    capture_state_changed(j, false);
    j->graph = nullptr;
    j->capture_origin = nullptr;
  }
  s->capture_joined.clear();
  s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
  capture_state_changed(s, false);
  forget_capture(s);
  Graph* g = std::exchange(s->graph, nullptr);
  if (s->capture_invalidated.exchange(false)) {
    *phGraph = nullptr;  // a prohibited call invalidated it; its graph is gone
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  if (unjoined) {
    *phGraph = nullptr;  // the capture is invalidated; its graph is gone
    return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  }
  *phGraph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult is_capturing(CUstream hStream, CUstreamCaptureStatus* status) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hStream, &s); r != CUDA_SUCCESS) return r;
  *status = s->capture != CU_STREAM_CAPTURE_STATUS_NONE && capture_invalidated(s)
                ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                : s->capture;
  return CUDA_SUCCESS;
}

CUresult capture_info(CUstream hStream, CUstreamCaptureStatus* status, cuuint64_t* id,
                      CUgraph* graph, const CUgraphNode** deps, size_t* numDeps) {
  if (CUresult r = is_capturing(hStream, status); r != CUDA_SUCCESS) return r;
  Stream* s = nullptr;
  resolve_stream(hStream, &s);
  if (id) *id = s->capture_id;
  if (graph) *graph = reinterpret_cast<CUgraph>(s->graph);
  const bool active =
      s->capture != CU_STREAM_CAPTURE_STATUS_NONE && s->graph && !s->graph->nodes.empty();
  if (deps)
    *deps = active ? reinterpret_cast<const CUgraphNode*>(&s->graph->nodes.back()) : nullptr;
  if (numDeps) *numDeps = active ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult instantiate(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Graph* g = as_graph(hGraph);
  if (phGraphExec == nullptr || g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* exec = new GraphExec();
  exec->device = g->device;
  exec->peak_bytes = g->peak_bytes;
  exec->unfreed_bytes = g->unfreed_bytes;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    exec->unfreed = g->allocs;
  }
  exec->auto_free = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
  for (GraphNode* n : g->nodes) {
    if (n->type == CU_GRAPH_NODE_TYPE_KERNEL || n->type == CU_GRAPH_NODE_TYPE_MEMCPY ||
        n->type == CU_GRAPH_NODE_TYPE_MEMSET) {
      exec->kernels.push_back(n->duration_ns);
    }
  }
  register_handle(exec, HandleKind::graph_exec);
  *phGraphExec = reinterpret_cast<CUgraphExec>(exec);
  return CUDA_SUCCESS;
}

// A launch allocates the graph's unfreed allocations again, at the addresses
// fixed at capture: those of the previous launch must have been freed by
// then, unless the graph frees them itself on launch (auto-free).
CUresult take_back_unfreed(GraphExec* exec) {
  Driver& d = driver();
  uint64_t freed = 0;
  {
    std::lock_guard<std::mutex> guard(d.mu);
    for (const auto& [base, bytes] : exec->unfreed) {
      auto it = d.regions.find(base);
      if (it == d.regions.end() || !exec->launched) continue;
      if (!exec->auto_free) return CUDA_ERROR_INVALID_VALUE;
      freed += it->second.size;
      d.regions.erase(it);
    }
  }
  if (freed) graph_memory_freed(exec->device, freed);
  return CUDA_SUCCESS;
}

void place_unfreed(GraphExec* exec) {
  Driver& d = driver();
  std::lock_guard<std::mutex> guard(d.mu);
  for (const auto& [base, bytes] : exec->unfreed) {
    Region r;
    r.size = bytes;
    r.kind = RegionKind::graph;
    r.device = exec->device;
    r.owns_va = false;  // the address belongs to the graph, for every launch
    r.backing = std::make_shared<Backing>();
    r.backing->size = bytes;
    d.regions[base] = std::move(r);
  }
}

CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  GraphExec* exec = as_exec(hGraphExec);
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hStream, &s); r != CUDA_SUCCESS) return r;
  if (exec->peak_bytes && s->capture == CU_STREAM_CAPTURE_STATUS_NONE) {
    if (CUresult r = take_back_unfreed(exec); r != CUDA_SUCCESS) return r;
    if (CUresult r = reserve_graph_memory(exec->device, exec->peak_bytes, exec->unfreed_bytes);
        r != CUDA_SUCCESS) {
      return r;
    }
    place_unfreed(exec);
    exec->launched = true;
  }
  for (uint64_t ns : exec->kernels) {
    CUresult r = s->capture != CU_STREAM_CAPTURE_STATUS_NONE ? capture_kernel(s, ns)
                                                             : submit(s, ItemKind::kernel, ns);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult graph_upload(CUgraphExec hGraphExec, CUstream hStream) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Stream* s = nullptr;
  if (as_exec(hGraphExec) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return resolve_stream(hStream, &s);
}

}  // namespace

namespace fakegpu {

void invalidate_capture(Stream* s) {
  (s->capture_origin ? s->capture_origin : s)->capture_invalidated = true;
}

bool capture_invalidated(const Stream* s) {
  const Stream* origin = s->capture_origin ? s->capture_origin : s;
  return origin->capture_invalidated.load();
}

CUresult unsafe_call_during_captures() {
  const CUstreamCaptureMode mine = tls_capture_mode;
  if (mine == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  const std::thread::id me = std::this_thread::get_id();
  bool prohibited = false;
  std::lock_guard<std::mutex> guard(captures_mutex());
  // A capture whose stream is gone (destroyed, or with its context) ended.
  std::erase_if(active_captures(), [](const ActiveCapture& c) {
    return !context_alive(c.origin->ctx) ||
           (!c.builtin && !is_handle(c.origin, HandleKind::stream));
  });
  for (const ActiveCapture& c : active_captures()) {
    const bool own = c.owner == me;
    if ((own && c.mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
        (!own && mine == CU_STREAM_CAPTURE_MODE_GLOBAL &&
         c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
      c.origin->capture_invalidated = true;
      prohibited = true;
    }
  }
  return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult capture_kernel(Stream* s, uint64_t duration_ns) {
  if (capture_invalidated(s)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  ++s->capture_ops;
  add_node(s->graph, CU_GRAPH_NODE_TYPE_KERNEL, duration_ns);
  return CUDA_SUCCESS;
}

namespace {

// An allocation node's memory in graph `g` on physical `device`, under the
// driver's lock: its address is fixed now and valid for the graph's work; the
// memory exists from a launch on.
CUresult graph_alloc(Graph* g, int device, uint64_t bytes, CUdeviceptr* out) {
  Driver& d = driver();
  if (g->device >= 0 && g->device != device) return CUDA_ERROR_NOT_SUPPORTED;
  const uint64_t granules = (bytes + kGraphGranule - 1) / kGraphGranule * kGraphGranule;
  if (granules < bytes) return CUDA_ERROR_OUT_OF_MEMORY;  // wrapped
  const uint64_t base = va_alloc(granules, kGraphGranule);
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  g->device = device;
  Region r;
  r.size = granules;
  r.kind = RegionKind::graph;
  r.device = device;
  r.owns_va = false;  // the graph's, for every launch
  r.backing = std::make_shared<Backing>();
  r.backing->size = granules;
  d.regions[base] = std::move(r);
  g->allocs[base] = granules;
  g->peak_bytes += granules;
  g->unfreed_bytes += granules;
  *out = base;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult capture_alloc(Stream* s, uint64_t bytes, CUdeviceptr* out) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (capture_invalidated(s)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  std::lock_guard<std::mutex> guard(driver().mu);
  if (CUresult r = graph_alloc(s->graph, s->ctx->device, bytes, out); r != CUDA_SUCCESS) return r;
  add_node(s->graph, CU_GRAPH_NODE_TYPE_MEM_ALLOC, 0);
  ++s->capture_ops;
  return CUDA_SUCCESS;
}

CUresult capture_free(Stream* s, uint64_t ptr) {
  if (capture_invalidated(s)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  std::lock_guard<std::mutex> guard(driver().mu);
  Graph* g = s->graph;
  auto it = g->allocs.find(ptr);
  if (it != g->allocs.end()) {
    g->unfreed_bytes -= std::min(g->unfreed_bytes, it->second);
    g->allocs.erase(it);
  }
  add_node(g, CU_GRAPH_NODE_TYPE_MEM_FREE, 0);
  ++s->capture_ops;
  return CUDA_SUCCESS;
}

void graph_memory_freed(int device, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(driver().mu);
  GraphPool& p = graph_pools[device];
  p.used -= std::min(p.used, bytes);
}

CUresult capture_event_record(Stream* s, Event* e) {
  if (capture_invalidated(s)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  e->captured = true;  // querying an event recorded during capture is illegal
  e->capture_stream = s;
  e->capture_ops = s->capture_ops;
  return CUDA_SUCCESS;
}

namespace {
Stream* origin_of(Stream* s) {
  return s->capture_origin ? s->capture_origin : s;
}
}  // namespace

CUresult capture_wait_event(Stream* s, Event* e) {
  Stream* src = e->capture_stream.load();
  if (src == nullptr || src->capture == CU_STREAM_CAPTURE_STATUS_NONE)
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;  // its capture has ended
  Stream* origin = origin_of(src);
  if (origin->capture_invalidated ||
      (s->capture != CU_STREAM_CAPTURE_STATUS_NONE && capture_invalidated(s)))
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) {
    // The fork: s joins the capture.
    s->capture = origin->capture;
    capture_state_changed(s, true);
    s->capture_mode = origin->capture_mode;
    s->capture_id = origin->capture_id;
    s->graph = origin->graph;
    s->capture_origin = origin;
    s->capture_ops = s->capture_joined_ops = 0;
    origin->capture_joined.push_back(s);
    return CUDA_SUCCESS;
  }
  if (origin_of(s) != origin) return CUDA_ERROR_STREAM_CAPTURE_MERGE;
  // A join: s now depends on src's work up to the record.
  if (src != s)
    src->capture_joined_ops = std::max<uint64_t>(src->capture_joined_ops, e->capture_ops);
  return CUDA_SUCCESS;
}

}  // namespace fakegpu

FAKEGPU_API CUresult cuStreamBeginCapture(CUstream hStream) {
  return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
FAKEGPU_API CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
FAKEGPU_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return begin_capture(hStream, mode);
}
FAKEGPU_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return begin_capture(hStream, mode);
}
FAKEGPU_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return end_capture(hStream, phGraph);
}
FAKEGPU_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return end_capture(hStream, phGraph);
}
FAKEGPU_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return is_capturing(hStream, captureStatus);
}
FAKEGPU_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream,
                                              CUstreamCaptureStatus* captureStatus) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return is_capturing(hStream, captureStatus);
}
FAKEGPU_API CUresult cuStreamGetCaptureInfo_v2(CUstream hStream,
                                               CUstreamCaptureStatus* captureStatus_out,
                                               cuuint64_t* id_out, CUgraph* graph_out,
                                               const CUgraphNode** dependencies_out,
                                               size_t* numDependencies_out) {
  return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                      numDependencies_out);
}
FAKEGPU_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                                    CUstreamCaptureStatus* captureStatus_out,
                                                    cuuint64_t* id_out, CUgraph* graph_out,
                                                    const CUgraphNode** dependencies_out,
                                                    size_t* numDependencies_out) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                      numDependencies_out);
}
FAKEGPU_API CUresult cuStreamGetCaptureInfo_v3(CUstream hStream,
                                               CUstreamCaptureStatus* captureStatus_out,
                                               cuuint64_t* id_out, CUgraph* graph_out,
                                               const CUgraphNode** dependencies_out,
                                               const CUgraphEdgeData** edgeData_out,
                                               size_t* numDependencies_out) {
  if (edgeData_out) *edgeData_out = nullptr;
  return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                      numDependencies_out);
}
FAKEGPU_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                    CUstreamCaptureStatus* captureStatus_out,
                                                    cuuint64_t* id_out, CUgraph* graph_out,
                                                    const CUgraphNode** dependencies_out,
                                                    const CUgraphEdgeData** edgeData_out,
                                                    size_t* numDependencies_out) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  if (edgeData_out) *edgeData_out = nullptr;
  return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                      numDependencies_out);
}

FAKEGPU_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, tls_capture_mode);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *phGraph = reinterpret_cast<CUgraph>(new_graph());
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuGraphDestroy(CUgraph hGraph) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (!unregister_handle(hGraph, HandleKind::graph)) return CUDA_ERROR_INVALID_VALUE;
  auto* g = reinterpret_cast<Graph*>(hGraph);
  for (GraphNode* n : g->nodes) {
    unregister_handle(n, HandleKind::graph_node);
    delete n;
  }
  delete g;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuGraphAddKernelNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph,
                                             const CUgraphNode* dependencies,
                                             size_t numDependencies,
                                             const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  (void)dependencies, (void)numDependencies;
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Graph* g = as_graph(hGraph);
  if (g == nullptr || phGraphNode == nullptr || nodeParams == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  Function* fn = as_function(nodeParams->func ? nodeParams->func
                                              : reinterpret_cast<CUfunction>(nodeParams->kern));
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *phGraphNode = reinterpret_cast<CUgraphNode>(
      add_node(g, CU_GRAPH_NODE_TYPE_KERNEL,
               kernel_duration_ns(fn, nodeParams->kernelParams, nodeParams->extra)));
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuGraphAddEmptyNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                         const CUgraphNode* dependencies, size_t numDependencies) {
  (void)dependencies, (void)numDependencies;
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Graph* g = as_graph(hGraph);
  if (g == nullptr || phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *phGraphNode = reinterpret_cast<CUgraphNode>(add_node(g, CU_GRAPH_NODE_TYPE_EMPTY, 0));
  return CUDA_SUCCESS;
}

namespace {

// An allocation node (cuGraphAddMemAllocNode, cuGraphAddNode): device memory
// of the location's device, pinned, no IPC handle types, as cuda.h asks.
CUresult add_mem_alloc_node(CUgraphNode* phGraphNode, CUgraph hGraph, const CUmemPoolProps& props,
                            size_t bytesize, CUdeviceptr* dptr) {
  Graph* g = as_graph(hGraph);
  if (g == nullptr || phGraphNode == nullptr || bytesize == 0 ||
      props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props.location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_ordinal(props.location.id) ||
      props.handleTypes != CU_MEM_HANDLE_TYPE_NONE)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  if (CUresult r = graph_alloc(g, physical(props.location.id), bytesize, dptr); r != CUDA_SUCCESS)
    return r;
  *phGraphNode = reinterpret_cast<CUgraphNode>(add_node(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC, 0));
  return CUDA_SUCCESS;
}

// cuGraphAddNode's node kinds that fakegpu models: kernels, empty nodes and
// allocations; the others are not supported.
CUresult add_node_of_params(CUgraphNode* phGraphNode, CUgraph hGraph,
                            CUgraphNodeParams* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (nodeParams->type) {
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return add_mem_alloc_node(phGraphNode, hGraph, nodeParams->alloc.poolProps,
                                nodeParams->alloc.bytesize, &nodeParams->alloc.dptr);
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return cuGraphAddEmptyNode(phGraphNode, hGraph, nullptr, 0);
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      Graph* g = as_graph(hGraph);
      const CUDA_KERNEL_NODE_PARAMS_v3& k = nodeParams->kernel;
      Function* fn = as_function(k.func ? k.func : reinterpret_cast<CUfunction>(k.kern));
      if (g == nullptr || phGraphNode == nullptr || fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
      *phGraphNode = reinterpret_cast<CUgraphNode>(
          add_node(g, CU_GRAPH_NODE_TYPE_KERNEL, kernel_duration_ns(fn, k.kernelParams, k.extra)));
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

}  // namespace

FAKEGPU_API CUresult cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                            const CUgraphNode* dependencies, size_t numDependencies,
                                            CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  (void)dependencies, (void)numDependencies;
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return add_mem_alloc_node(phGraphNode, hGraph, nodeParams->poolProps, nodeParams->bytesize,
                            &nodeParams->dptr);
}

FAKEGPU_API CUresult cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                    const CUgraphNode* dependencies, size_t numDependencies,
                                    CUgraphNodeParams* nodeParams) {
  (void)dependencies, (void)numDependencies;
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  return add_node_of_params(phGraphNode, hGraph, nodeParams);
}

FAKEGPU_API CUresult cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph,
                                       const CUgraphNode* dependencies,
                                       const CUgraphEdgeData* dependencyData,
                                       size_t numDependencies, CUgraphNodeParams* nodeParams) {
  (void)dependencies, (void)dependencyData, (void)numDependencies;
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  return add_node_of_params(phGraphNode, hGraph, nodeParams);
}

FAKEGPU_API CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Graph* g = as_graph(hGraph);
  if (g == nullptr || numNodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodes) {
    const size_t n = std::min(*numNodes, g->nodes.size());
    for (size_t i = 0; i < n; ++i) nodes[i] = reinterpret_cast<CUgraphNode>(g->nodes[i]);
    *numNodes = n;
  } else {
    *numNodes = g->nodes.size();
  }
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  GraphNode* n = handle_object<GraphNode>(hNode, HandleKind::graph_node);
  if (n == nullptr || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *type = n->type;
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                 unsigned long long flags) {
  return instantiate(phGraphExec, hGraph, flags);
}

FAKEGPU_API CUresult cuGraphInstantiateWithParams(
    CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  CUresult r = instantiate(phGraphExec, hGraph, instantiateParams ? instantiateParams->flags : 0);
  if (instantiateParams)
    instantiateParams->result_out =
        r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}
FAKEGPU_API CUresult cuGraphInstantiateWithParams_ptsz(
    CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return cuGraphInstantiateWithParams(phGraphExec, hGraph, instantiateParams);
}

FAKEGPU_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (!unregister_handle(hGraphExec, HandleKind::graph_exec)) return CUDA_ERROR_INVALID_VALUE;
  delete reinterpret_cast<GraphExec*>(hGraphExec);
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return graph_launch(hGraphExec, hStream);
}
FAKEGPU_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return graph_launch(hGraphExec, hStream);
}
FAKEGPU_API CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  return graph_upload(hGraphExec, hStream);
}
FAKEGPU_API CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return graph_upload(hGraphExec, hStream);
}

// ---- the device graph memory pool ----

FAKEGPU_API CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                                  void* value) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (!valid_ordinal(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  const GraphPool& p = graph_pools[physical(device)];
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      *out = p.used;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      *out = p.used_high;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      *out = p.reserved;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      *out = p.reserved_high;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

FAKEGPU_API CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                                  void* value) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (!valid_ordinal(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr || *static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(driver().mu);
  GraphPool& p = graph_pools[physical(device)];
  if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) {
    p.used_high = p.used;
  } else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) {
    p.reserved_high = p.reserved;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuDeviceGraphMemTrim(CUdevice device) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (!valid_ordinal(device)) return CUDA_ERROR_INVALID_DEVICE;
  // Memory not backing live graph allocations goes back to the device
  // (the caller must have synchronised with running graphs, as documented).
  uint64_t give = 0;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    GraphPool& p = graph_pools[physical(device)];
    give = p.reserved - std::min(p.reserved, p.used);
    p.reserved -= give;
  }
  if (give) uncharge_device(physical(device), give);
  return CUDA_SUCCESS;
}
