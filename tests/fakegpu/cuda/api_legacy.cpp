// Older ABI versions whose signature is unchanged or trivially adapted
// (resolved by cuGetProcAddress for old cudaVersion values, and linked by
// old binaries). 32-bit-size v1 forms (cuMemAlloc, cuMemGetInfo, ...) stay
// NOT_SUPPORTED: nothing built in the last decade uses them.
#include "tests/fakegpu/cuda/driver.hpp"

FAKEGPU_API CUresult cuCtxDestroy(CUcontext ctx) {
  return cuCtxDestroy_v2(ctx);
}
FAKEGPU_API CUresult cuCtxPopCurrent(CUcontext* pctx) {
  return cuCtxPopCurrent_v2(pctx);
}
FAKEGPU_API CUresult cuCtxPushCurrent(CUcontext ctx) {
  return cuCtxPushCurrent_v2(ctx);
}
FAKEGPU_API CUresult cuStreamDestroy(CUstream hStream) {
  return cuStreamDestroy_v2(hStream);
}
FAKEGPU_API CUresult cuEventDestroy(CUevent hEvent) {
  return cuEventDestroy_v2(hEvent);
}
FAKEGPU_API CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return cuMemHostRegister_v2(p, bytesize, Flags);
}
FAKEGPU_API CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                        unsigned int Flags) {
  return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

FAKEGPU_API CUresult cuStreamGetCaptureInfo(CUstream hStream,
                                            CUstreamCaptureStatus* captureStatus_out,
                                            cuuint64_t* id_out) {
  return cuStreamGetCaptureInfo_v2(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr);
}
FAKEGPU_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                                 CUstreamCaptureStatus* captureStatus_out,
                                                 cuuint64_t* id_out) {
  const fakegpu::PerThreadDefaultStream per_thread_default_stream{};
  return cuStreamGetCaptureInfo_v2(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr);
}

FAKEGPU_API CUresult cuGraphAddKernelNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                          const CUgraphNode* dependencies, size_t numDependencies,
                                          const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS params{};
  params.func = nodeParams->func;
  params.gridDimX = nodeParams->gridDimX;
  params.gridDimY = nodeParams->gridDimY;
  params.gridDimZ = nodeParams->gridDimZ;
  params.blockDimX = nodeParams->blockDimX;
  params.blockDimY = nodeParams->blockDimY;
  params.blockDimZ = nodeParams->blockDimZ;
  params.sharedMemBytes = nodeParams->sharedMemBytes;
  params.kernelParams = nodeParams->kernelParams;
  params.extra = nodeParams->extra;
  return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &params);
}

namespace {
CUresult instantiate_with_log(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                              char* logBuffer, size_t bufferSize) {
  if (phErrorNode) *phErrorNode = nullptr;
  if (logBuffer && bufferSize) logBuffer[0] = '\0';
  return cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}
}  // namespace

FAKEGPU_API CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph,
                                        CUgraphNode* phErrorNode, char* logBuffer,
                                        size_t bufferSize) {
  return instantiate_with_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
FAKEGPU_API CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                           CUgraphNode* phErrorNode, char* logBuffer,
                                           size_t bufferSize) {
  return instantiate_with_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
