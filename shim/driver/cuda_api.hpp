// The CUDA Driver API declarations as the shim sees them: cuda.h and
// cudaTypedefs.h, then every API-renaming macro of cuda.h undone
// (`#define cuMemAlloc cuMemAlloc_v2`, ...), so that inside shim/ a cu* name
// always means the exported symbol it spells. The ABI of each symbol is the
// PFN_<base>_v<version> type of cudaTypedefs.h, plus the pre-3.2 (32-bit)
// ABIs that cudaTypedefs.h only declares for the driver's own build.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "cuda_undef_macros.inc"

namespace cushare::shim::legacy {

// The 32-bit ABIs that cuGetProcAddress still hands to callers asking for a
// cudaVersion below 3020 (PFN_..._v2000 in cudaTypedefs.h, internal section).
using DevicePtrV1 = unsigned int;
struct ArrayDescriptorV1 {
  unsigned int Width;
  unsigned int Height;
  CUarray_format Format;
  unsigned int NumChannels;
};
struct Array3DDescriptorV1 {
  unsigned int Width;
  unsigned int Height;
  unsigned int Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
};
using PFN_cuMemAlloc_v2000 = CUresult (*)(DevicePtrV1* dptr, unsigned int bytesize);
using PFN_cuMemAllocPitch_v2000 = CUresult (*)(DevicePtrV1* dptr, unsigned int* pPitch,
                                               unsigned int WidthInBytes, unsigned int Height,
                                               unsigned int ElementSizeBytes);
using PFN_cuMemFree_v2000 = CUresult (*)(DevicePtrV1 dptr);
using PFN_cuMemGetInfo_v2000 = CUresult (*)(unsigned int* free, unsigned int* total);
using PFN_cuDeviceTotalMem_v2000 = CUresult (*)(unsigned int* bytes, CUdevice dev);
using PFN_cuArrayCreate_v2000 = CUresult (*)(CUarray* pHandle,
                                             const ArrayDescriptorV1* pAllocateArray);
using PFN_cuArray3DCreate_v2000 = CUresult (*)(CUarray* pHandle,
                                               const Array3DDescriptorV1* pAllocateArray);
using PFN_cuCtxCreate_v2000 = CUresult (*)(CUcontext* pctx, unsigned int flags, CUdevice dev);
using PFN_cuCtxDestroy_v2000 = CUresult (*)(CUcontext ctx);
using PFN_cuStreamBeginCapture_v10000 = CUresult (*)(CUstream hStream);
using PFN_cuStreamDestroy_v2000 = CUresult (*)(CUstream hStream);
using PFN_cuMemcpyDtoH_v2000 = CUresult (*)(void* dstHost, DevicePtrV1 srcDevice,
                                            unsigned int ByteCount);
using PFN_cuDevicePrimaryCtxRelease_v7000 = CUresult (*)(CUdevice dev);
using PFN_cuDevicePrimaryCtxReset_v7000 = CUresult (*)(CUdevice dev);
// cuGraphInstantiate before CUDA 12 renamed it to cuGraphInstantiateWithFlags:
// the error node and log buffer form (bare: 10.0 ABI, _v2: 11.0 ABI).
using PFN_cuGraphInstantiate_v10000 = CUresult (*)(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                   CUgraphNode* phErrorNode, char* logBuffer,
                                                   size_t bufferSize);
using PFN_cuGraphInstantiate_v11000 = PFN_cuGraphInstantiate_v10000;

}  // namespace cushare::shim::legacy
