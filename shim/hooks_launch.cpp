// Launch hooks (every host-side launch path passes the compute gate of
// launch_gate.hpp, owned by the scheduler work), graph launch/upload (also
// settle graph memory), and stream-capture tracking.
#include "shim/capture_tracker.hpp"
#include "shim/graph_accounting.hpp"
#include "shim/hook_decls.hpp"
#include "shim/launch_gate.hpp"
#include "shim/shim_env.hpp"

using namespace cushare::shim;

namespace {

template <class Call>
CUresult gated(CUstream stream, Call&& call) {
  if (disabled_by_env()) [[unlikely]]
    return call();
  if (const CUresult g = launch_gate_enter(stream); g != CUDA_SUCCESS) return g;
  const CUresult rc = call();
  launch_gate_exit(stream, rc);
  return rc;
}

template <class Call>
CUresult gated_graph(CUstream stream, Call&& call) {
  const CUresult rc = gated(stream, call);
  if (rc == CUDA_SUCCESS) {
    if (const AllocationState* st = allocation_state()) graph_memory_settle(*st);
  }
  return rc;
}

template <class Call>
CUresult begin_capture(CUstream stream, Call&& call) {
  const CUresult rc = call();
  if (rc == CUDA_SUCCESS) capture_began(stream);
  return rc;
}

template <class Call>
CUresult end_capture(CUstream stream, Call&& call) {
  const CUresult rc = call();
  capture_ended(stream);  // a failed end still ends (invalidates) the capture
  return rc;
}

}  // namespace

extern "C" CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream,
                                   void** kernelParams, void** extra) {
  const RealDriver& r = real();
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
  const RealDriver& r = real();
  return gated(hStream, [&] {
    return r.cuLaunchKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                 sharedMemBytes, hStream, kernelParams, extra);
  });
}

extern "C" CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                                     void** kernelParams, void** extra) {
  const RealDriver& r = real();
  return gated(config ? config->hStream : nullptr,
               [&] { return r.cuLaunchKernelEx(config, f, kernelParams, extra); });
}

extern "C" CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                          void** kernelParams, void** extra) {
  const RealDriver& r = real();
  return gated(config ? config->hStream : nullptr,
               [&] { return r.cuLaunchKernelEx_ptsz(config, f, kernelParams, extra); });
}

extern "C" CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                              unsigned int gridDimY, unsigned int gridDimZ,
                                              unsigned int blockDimX, unsigned int blockDimY,
                                              unsigned int blockDimZ, unsigned int sharedMemBytes,
                                              CUstream hStream, void** kernelParams) {
  const RealDriver& r = real();
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
  const RealDriver& r = real();
  return gated(hStream, [&] {
    return r.cuLaunchCooperativeKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                            blockDimZ, sharedMemBytes, hStream, kernelParams);
  });
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
extern "C" CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList,
                                                         unsigned int numDevices,
                                                         unsigned int flags) {
  const RealDriver& r = real();
  if (!r.cuLaunchCooperativeKernelMultiDevice) return CUDA_ERROR_NOT_FOUND;
  CUstream stream = launchParamsList && numDevices ? launchParamsList[0].hStream : nullptr;
  return gated(stream, [&] {
    return r.cuLaunchCooperativeKernelMultiDevice(launchParamsList, numDevices, flags);
  });
}
#pragma GCC diagnostic pop

extern "C" CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  const RealDriver& r = real();
  return gated_graph(hStream, [&] { return r.cuGraphLaunch(hGraphExec, hStream); });
}

extern "C" CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  const RealDriver& r = real();
  return gated_graph(hStream, [&] { return r.cuGraphLaunch_ptsz(hGraphExec, hStream); });
}

extern "C" CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  const RealDriver& r = real();
  const CUresult rc = r.cuGraphUpload(hGraphExec, hStream);
  if (const AllocationState* st = allocation_state(); st && rc == CUDA_SUCCESS)
    graph_memory_settle(*st);
  return rc;
}

extern "C" CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  const RealDriver& r = real();
  const CUresult rc = r.cuGraphUpload_ptsz(hGraphExec, hStream);
  if (const AllocationState* st = allocation_state(); st && rc == CUDA_SUCCESS)
    graph_memory_settle(*st);
  return rc;
}

extern "C" CUresult cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                           const CUgraphNode* dependencies, size_t numDependencies,
                                           CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  const RealDriver& r = real();
  const CUresult rc =
      r.cuGraphAddMemAllocNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
  if (rc == CUDA_SUCCESS) graph_memory_expected();
  return rc;
}

extern "C" CUresult cuStreamBeginCapture(CUstream hStream) {
  const RealDriver& r = real();
  if (!r.cuStreamBeginCapture) return CUDA_ERROR_NOT_FOUND;
  return begin_capture(hStream, [&] { return r.cuStreamBeginCapture(hStream); });
}

extern "C" CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  const RealDriver& r = real();
  if (!r.cuStreamBeginCapture_ptsz) return CUDA_ERROR_NOT_FOUND;
  return begin_capture(hStream, [&] { return r.cuStreamBeginCapture_ptsz(hStream); });
}

extern "C" CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  const RealDriver& r = real();
  return begin_capture(hStream, [&] { return r.cuStreamBeginCapture_v2(hStream, mode); });
}

extern "C" CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  const RealDriver& r = real();
  return begin_capture(hStream, [&] { return r.cuStreamBeginCapture_v2_ptsz(hStream, mode); });
}

extern "C" CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                const CUgraphNode* dependencies,
                                                const CUgraphEdgeData* dependencyData,
                                                size_t numDependencies, CUstreamCaptureMode mode) {
  const RealDriver& r = real();
  if (!r.cuStreamBeginCaptureToGraph) return CUDA_ERROR_NOT_FOUND;
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
  const RealDriver& r = real();
  if (!r.cuStreamBeginCaptureToGraph_ptsz) return CUDA_ERROR_NOT_FOUND;
  return begin_capture(hStream, [&] {
    return r.cuStreamBeginCaptureToGraph_ptsz(hStream, hGraph, dependencies, dependencyData,
                                              numDependencies, mode);
  });
}

extern "C" CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  const RealDriver& r = real();
  return end_capture(hStream, [&] { return r.cuStreamEndCapture(hStream, phGraph); });
}

extern "C" CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  const RealDriver& r = real();
  return end_capture(hStream, [&] { return r.cuStreamEndCapture_ptsz(hStream, phGraph); });
}
