// Launch hooks (every host-side launch path passes the compute gate of
// launch_gate.hpp, owned by the scheduler work), graph launch/upload (also
// settle graph memory), and stream-capture tracking.
#include "shim/accounting/capture_tracker.hpp"
#include "shim/accounting/graph_accounting.hpp"
#include "shim/accounting/memory_quiescence.hpp"
#include "shim/gate/launch_gate.hpp"
#include "shim/gate/tracker.hpp"
#include "shim/hooks/decls.hpp"
#include "shim/hooks/support.hpp"
#include "shim/process/shim_env.hpp"

using namespace cushare::shim;

namespace {

// Under CUSHARE_DISABLE=1 (or before initialisation, or failed) there is no
// allocation state, and enter and exit pass straight through.
template <class Call>
CUresult gated(CUstream stream, Call&& call) {
  if (const CUresult g = launch_gate_enter(stream); g != CUDA_SUCCESS) return g;
  const CUresult rc = call();
  launch_gate_exit(stream, rc);
  return rc;
}

// Graph launches and uploads: reserve the graph memory the executable may
// add first (refuse when it does not fit), settle on the real growth after.
// From the reservation to the settling the charges are not what the device
// holds: one memory call, entered once the gate let the launch through.
template <class Call>
CUresult graph_run(CUgraphExec exec, CUstream stream, bool gate, Call&& call) {
  if (gate) {
    if (const CUresult g = launch_gate_enter(stream); g != CUDA_SUCCESS) return g;
  }
  CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
  {
    const AllocationState* st = allocation_state();
    const bool graph_memory = st && graph_memory_in_use();
    if (graph_memory) {
      CUdevice dev;
      allocation_gpu_index(*st, dev);  // a primary context made unseen is measured first
    }
    const MemoryOp op(graph_memory ? st : nullptr);
    std::uint64_t reserved = 0;
    if (!st || graph_launch_reserve(*st, exec, reserved)) {
      rc = call();
      // After a failure this returns the reservation (nothing grew); with
      // none, there is nothing to settle.
      if (st && (rc == CUDA_SUCCESS || reserved)) graph_memory_settle(*st, reserved);
    }
  }
  if (gate) launch_gate_exit(stream, rc);
  return rc;
}

// cuGraphAddNode (12.2) and its 12.3 ABI with edge data add any kind of node:
// an allocation node among them is graph memory as cuGraphAddMemAllocNode's.
template <class Call>
CUresult node_added(CUgraph graph, const CUgraphNodeParams* params, Call&& call) {
  const CUresult rc = call();
  if (rc == CUDA_SUCCESS && params && params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
    graph_add_alloc(graph, params->alloc.bytesize);
  return rc;
}

// After any instantiation: the executable inherits the graph's memory needs.
CUresult instantiated(CUresult rc, CUgraphExec* exec, CUgraph graph) {
  if (rc == CUDA_SUCCESS && exec) graph_instantiated(*exec, graph);
  return rc;
}

template <class Call>
CUresult begin_capture(CUstream stream, Call&& call) {
  set_capture_status_query(real().cuStreamIsCapturing, real().cuStreamGetCaptureInfo_v2);
  const gate::RecordsHeld held;  // no gate record lands in the capture
  const CUresult rc = call();
  if (rc == CUDA_SUCCESS) capture_began(stream);
  return rc;
}

template <class Call>
CUresult end_capture(CUstream stream, CUgraph* graph, Call&& call) {
  const CUresult rc = call();
  // A failed end still ends (invalidates) the capture.
  const std::uint64_t captured = capture_ended(stream);
  if (rc == CUDA_SUCCESS && graph && *graph && captured) graph_add_alloc(*graph, captured);
  return rc;
}

}  // namespace

extern "C" CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream,
                                   void** kernelParams, void** extra) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuLaunchKernel)
  return gated(hStream, [&] {
    return r.cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                            sharedMemBytes, hStream, kernelParams, extra);
  });
}

extern "C" CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX,
                                        unsigned int blockDimY, unsigned int blockDimZ,
                                        unsigned int sharedMemBytes, CUstream hStream,
                                        void** kernelParams, void** extra) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuLaunchKernel_ptsz)
  return gated(per_thread_default(hStream), [&] {
    return r.cuLaunchKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                 sharedMemBytes, hStream, kernelParams, extra);
  });
}

extern "C" CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                                     void** kernelParams, void** extra) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuLaunchKernelEx)
  return gated(config ? config->hStream : nullptr,
               [&] { return r.cuLaunchKernelEx(config, f, kernelParams, extra); });
}

extern "C" CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                          void** kernelParams, void** extra) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuLaunchKernelEx_ptsz)
  return gated(per_thread_default(config ? config->hStream : nullptr),
               [&] { return r.cuLaunchKernelEx_ptsz(config, f, kernelParams, extra); });
}

extern "C" CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                              unsigned int gridDimY, unsigned int gridDimZ,
                                              unsigned int blockDimX, unsigned int blockDimY,
                                              unsigned int blockDimZ, unsigned int sharedMemBytes,
                                              CUstream hStream, void** kernelParams) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuLaunchCooperativeKernel)
  return gated(hStream, [&] {
    return r.cuLaunchCooperativeKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                       blockDimZ, sharedMemBytes, hStream, kernelParams);
  });
}

extern "C" CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                   unsigned int gridDimY, unsigned int gridDimZ,
                                                   unsigned int blockDimX, unsigned int blockDimY,
                                                   unsigned int blockDimZ,
                                                   unsigned int sharedMemBytes, CUstream hStream,
                                                   void** kernelParams) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuLaunchCooperativeKernel_ptsz)
  return gated(per_thread_default(hStream), [&] {
    return r.cuLaunchCooperativeKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                            blockDimZ, sharedMemBytes, hStream, kernelParams);
  });
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
extern "C" CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList,
                                                         unsigned int numDevices,
                                                         unsigned int flags) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuLaunchCooperativeKernelMultiDevice)
  CUstream stream = launchParamsList && numDevices ? launchParamsList[0].hStream : nullptr;
  return gated(stream, [&] {
    return r.cuLaunchCooperativeKernelMultiDevice(launchParamsList, numDevices, flags);
  });
}
#pragma GCC diagnostic pop

extern "C" CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphLaunch)
  return graph_run(hGraphExec, hStream, true, [&] { return r.cuGraphLaunch(hGraphExec, hStream); });
}

extern "C" CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphLaunch_ptsz)
  return graph_run(hGraphExec, per_thread_default(hStream), true,
                   [&] { return r.cuGraphLaunch_ptsz(hGraphExec, hStream); });
}

extern "C" CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphUpload)
  return graph_run(hGraphExec, hStream, false,
                   [&] { return r.cuGraphUpload(hGraphExec, hStream); });
}

extern "C" CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphUpload_ptsz)
  return graph_run(hGraphExec, per_thread_default(hStream), false,
                   [&] { return r.cuGraphUpload_ptsz(hGraphExec, hStream); });
}

extern "C" CUresult cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                           const CUgraphNode* dependencies, size_t numDependencies,
                                           CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphAddMemAllocNode)
  const CUresult rc =
      r.cuGraphAddMemAllocNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
  if (rc == CUDA_SUCCESS && nodeParams) graph_add_alloc(hGraph, nodeParams->bytesize);
  return rc;
}

// Both ABIs of cuGraphAddNode: node_added, above.
extern "C" CUresult cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                   const CUgraphNode* dependencies, size_t numDependencies,
                                   CUgraphNodeParams* nodeParams) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphAddNode)
  return node_added(hGraph, nodeParams, [&] {
    return r.cuGraphAddNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
  });
}

extern "C" CUresult cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph,
                                      const CUgraphNode* dependencies,
                                      const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                      CUgraphNodeParams* nodeParams) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphAddNode_v2)
  return node_added(hGraph, nodeParams, [&] {
    return r.cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, dependencyData, numDependencies,
                               nodeParams);
  });
}

// Every instantiation, the pre-12.0 ABIs too (cudaVersion 10000 and 11000
// through cuGetProcAddress, or binaries linked against an older libcuda):
// the executable inherits the graph's memory needs, so that its launches
// reserve before they run.
extern "C" CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph,
                                       CUgraphNode* phErrorNode, char* logBuffer,
                                       size_t bufferSize) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphInstantiate)
  return instantiated(r.cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize),
                      phGraphExec, hGraph);
}

extern "C" CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                          CUgraphNode* phErrorNode, char* logBuffer,
                                          size_t bufferSize) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphInstantiate_v2)
  return instantiated(
      r.cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize), phGraphExec,
      hGraph);
}

extern "C" CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                unsigned long long flags) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphInstantiateWithFlags)
  return instantiated(r.cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags), phGraphExec,
                      hGraph);
}

extern "C" CUresult cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                 CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphInstantiateWithParams)
  return instantiated(r.cuGraphInstantiateWithParams(phGraphExec, hGraph, instantiateParams),
                      phGraphExec, hGraph);
}

extern "C" CUresult cuGraphInstantiateWithParams_ptsz(
    CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuGraphInstantiateWithParams_ptsz)
  return instantiated(r.cuGraphInstantiateWithParams_ptsz(phGraphExec, hGraph, instantiateParams),
                      phGraphExec, hGraph);
}

extern "C" CUresult cuStreamBeginCapture(CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamBeginCapture)
  return begin_capture(hStream, [&] { return r.cuStreamBeginCapture(hStream); });
}

extern "C" CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamBeginCapture_ptsz)
  return begin_capture(per_thread_default(hStream),
                       [&] { return r.cuStreamBeginCapture_ptsz(hStream); });
}

extern "C" CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamBeginCapture_v2)
  return begin_capture(hStream, [&] { return r.cuStreamBeginCapture_v2(hStream, mode); });
}

extern "C" CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamBeginCapture_v2_ptsz)
  return begin_capture(per_thread_default(hStream),
                       [&] { return r.cuStreamBeginCapture_v2_ptsz(hStream, mode); });
}

extern "C" CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                const CUgraphNode* dependencies,
                                                const CUgraphEdgeData* dependencyData,
                                                size_t numDependencies, CUstreamCaptureMode mode) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamBeginCaptureToGraph)
  return begin_capture(hStream, [&] {
    return r.cuStreamBeginCaptureToGraph(hStream, hGraph, dependencies, dependencyData,
                                         numDependencies, mode);
  });
}

extern "C" CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                     const CUgraphNode* dependencies,
                                                     const CUgraphEdgeData* dependencyData,
                                                     size_t numDependencies,
                                                     CUstreamCaptureMode mode) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamBeginCaptureToGraph_ptsz)
  return begin_capture(per_thread_default(hStream), [&] {
    return r.cuStreamBeginCaptureToGraph_ptsz(hStream, hGraph, dependencies, dependencyData,
                                              numDependencies, mode);
  });
}

extern "C" CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamEndCapture)
  return end_capture(hStream, phGraph, [&] { return r.cuStreamEndCapture(hStream, phGraph); });
}

extern "C" CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamEndCapture_ptsz)
  return end_capture(per_thread_default(hStream), phGraph,
                     [&] { return r.cuStreamEndCapture_ptsz(hStream, phGraph); });
}

// Stream destruction: the gate may still need the handle for a tail of
// launches (gate/tracker.hpp); it records that tail first.
extern "C" CUresult cuStreamDestroy(CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamDestroy)
  gate::streams_destroying(hStream);
  return r.cuStreamDestroy(hStream);
}

extern "C" CUresult cuStreamDestroy_v2(CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamDestroy_v2)
  gate::streams_destroying(hStream);
  return r.cuStreamDestroy_v2(hStream);
}

// Synchronisation: when it returns, the work it waited for is complete; the
// launch gate learns so at once (gate/tracker.hpp, after_sync), so the
// idle gap before the next launch is measured rather than charged. Memory
// pools may give memory back there (SyncOp).
namespace {
template <typename Sync>
CUresult synchronised(CUstream stream, gate::SyncScope scope, Sync&& sync) {
  gate::GpuTracker* tr = gate::syncing(stream, scope);
  const SyncOp op;
  const CUresult rc = sync();
  if (tr && rc == CUDA_SUCCESS) tr->after_sync();
  return rc;
}
}  // namespace

extern "C" CUresult cuCtxSynchronize() {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuCtxSynchronize)
  return synchronised(nullptr, gate::SyncScope::kContext, [&] { return r.cuCtxSynchronize(); });
}

extern "C" CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuCtxSynchronize_v2)
  // Another context than the current one says nothing about the tracker's.
  CUcontext current = nullptr;
  if (ctx && r.cuCtxGetCurrent) r.cuCtxGetCurrent(&current);
  if (ctx && ctx != current) {
    const SyncOp op;
    return r.cuCtxSynchronize_v2(ctx);
  }
  return synchronised(nullptr, gate::SyncScope::kContext,
                      [&] { return r.cuCtxSynchronize_v2(ctx); });
}

// Which stream the event was recorded on is not known here: the gate records
// its own event behind this process's unrecorded launches first and, once
// the wait returns, completes the batches whose events completed (none, if
// the awaited event did not cover them). Waited for through the poller
// alone, a loop that waits on an event after every kernel was seen busy
// through its gaps: with 100 us kernels, capped at 30 without a daemon, it
// ran 19-21 %.
extern "C" CUresult cuEventSynchronize(CUevent hEvent) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuEventSynchronize)
  return synchronised(nullptr, gate::SyncScope::kUnnamedStream,
                      [&] { return r.cuEventSynchronize(hEvent); });
}

// A copy to host memory returns once it, and the work before it in its
// stream, completed (the legacy default stream, which waits for the
// blocking streams, or with _ptds the thread's): a step that ends in a copy
// back is a sync, on a stream the call does not name, as an event wait is.
extern "C" CUresult cuMemcpyDtoH(void* dstHost, legacy::DevicePtrV1 srcDevice,
                                 unsigned int ByteCount) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemcpyDtoH)
  return synchronised(nullptr, gate::SyncScope::kUnnamedStream,
                      [&] { return r.cuMemcpyDtoH(dstHost, srcDevice, ByteCount); });
}

extern "C" CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemcpyDtoH_v2)
  return synchronised(nullptr, gate::SyncScope::kUnnamedStream,
                      [&] { return r.cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount); });
}

extern "C" CUresult cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemcpyDtoH_v2_ptds)
  return synchronised(nullptr, gate::SyncScope::kUnnamedStream,
                      [&] { return r.cuMemcpyDtoH_v2_ptds(dstHost, srcDevice, ByteCount); });
}

extern "C" CUresult cuStreamSynchronize(CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamSynchronize)
  return synchronised(hStream, gate::SyncScope::kStream,
                      [&] { return r.cuStreamSynchronize(hStream); });
}

extern "C" CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamSynchronize_ptsz)
  return synchronised(per_thread_default(hStream), gate::SyncScope::kStream,
                      [&] { return r.cuStreamSynchronize_ptsz(hStream); });
}

// Polling: a query made while the process waits for its work (the
// launching thread's, or the second with no launch between:
// gate/poll_wait.hpp) records the tail as a sync does, and one that finds
// the work done completes it. Left to the poller, a tenant that polls after
// every kernel is seen busy through its gaps until the poller records its
// tail. Memory pools give nothing back at a query: no SyncOp.
namespace {
template <typename Query>
CUresult polled(CUstream stream, gate::SyncScope scope, Query&& query) {
  const gate::Polling p = gate::polling(stream, scope);
  const CUresult rc = query();
  if (p.tracker) p.tracker->after_poll(stream, scope, rc, p.launches);
  return rc;
}
}  // namespace

extern "C" CUresult cuStreamQuery(CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamQuery)
  return polled(hStream, gate::SyncScope::kStream, [&] { return r.cuStreamQuery(hStream); });
}

extern "C" CUresult cuStreamQuery_ptsz(CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuStreamQuery_ptsz)
  return polled(per_thread_default(hStream), gate::SyncScope::kStream,
                [&] { return r.cuStreamQuery_ptsz(hStream); });
}

extern "C" CUresult cuEventQuery(CUevent hEvent) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuEventQuery)
  return polled(nullptr, gate::SyncScope::kUnnamedStream, [&] { return r.cuEventQuery(hEvent); });
}
