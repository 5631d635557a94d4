// Bad handles get the driver's error, never a crash: every function that
// takes a handle is called with a small integer, a live heap object of another
// kind (a std::string, a live handle of another type) and a destroyed handle.
// Contexts answer CUDA_ERROR_INVALID_CONTEXT; streams, events, modules,
// functions, libraries, kernels and arrays CUDA_ERROR_INVALID_HANDLE; graphs,
// pools and VMM allocation handles CUDA_ERROR_INVALID_VALUE, the only error
// their part of the API documents for a bad argument.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/integration/fakegpu/cu_expect.hpp"
#include "tests/integration/fakegpu/noop_ptx.hpp"

namespace {

using fakegpu_test::error_name;

constexpr const char* kPtx = fakegpu_test::kNoopPtx;

template <typename Handle>
Handle as(uintptr_t value) {
  if constexpr (std::is_pointer_v<Handle>) {
    return reinterpret_cast<Handle>(value);
  } else {
    return static_cast<Handle>(value);
  }
}

template <typename Handle>
Handle as(const void* object) {
  return as<Handle>(reinterpret_cast<uintptr_t>(object));
}

// kFreedAddressesMayBeReused: a destroyed handle's object may be freed, and
// the next handle of its kind may get the same address (the driver may reuse
// handle values too); that value is then a valid handle again. So each test
// makes its live handles before it destroys the ones it passes as destroyed,
// and makes no handle of the same kind afterwards.

// Bad values of one handle type, each with what it is.
template <typename Handle>
using BadHandles = std::vector<std::pair<std::string, Handle>>;

// Calls `call` with every bad handle and expects `expected` each time.
template <typename Handle>
void expect_refused(const char* what, const BadHandles<Handle>& bad, CUresult expected,
                    const std::function<CUresult(Handle)>& call) {
  for (const auto& [label, handle] : bad) {
    EXPECT_EQ(error_name(call(handle)), error_name(expected)) << what << " with " << label;
  }
}

class BadHandle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuEventCreate(&event_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleLoadData(&module_, kPtx), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&noop_, module_, "noop"), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc(&buffer_, 1 << 20), CUDA_SUCCESS);
  }
  static void TearDownTestSuite() {  // the primary context stays, as for the other suites
    cuMemFree(buffer_);
    cuModuleUnload(module_);
    cuEventDestroy(event_);
    cuStreamDestroy(stream_);
  }
  void SetUp() override {
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(cuMemGetInfo(&free_before_, &total_), CUDA_SUCCESS);
  }
  // A refused call charges nothing.
  void TearDown() override {
    size_t free_after = 0;
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(cuMemGetInfo(&free_after, &total_), CUDA_SUCCESS);
    EXPECT_EQ(free_after, free_before_);
  }

  // A small integer and a live heap object that is not a handle of any kind,
  // plus `others`: live handles of other types.
  template <typename Handle>
  static BadHandles<Handle> bad(Handle destroyed, BadHandles<Handle> others = {}) {
    static const auto* heap = new std::string(64, 'x');
    BadHandles<Handle> all = {{"the integer 0x10", as<Handle>(uintptr_t{0x10})},
                              {"a std::string on the heap", as<Handle>(heap)},
                              {"a destroyed handle", destroyed}};
    for (auto& other : others) all.push_back(std::move(other));
    return all;
  }
  static BadHandles<CUstream> bad_streams() {
    CUstream s = nullptr;
    EXPECT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
    return bad<CUstream>(
        s, {{"a live event", as<CUstream>(event_)}, {"a live context", as<CUstream>(ctx_)}});
  }

  static inline CUcontext ctx_ = nullptr;
  static inline CUstream stream_ = nullptr;
  static inline CUevent event_ = nullptr;
  static inline CUmodule module_ = nullptr;
  static inline CUfunction noop_ = nullptr;
  static inline CUdeviceptr buffer_ = 0;
  size_t free_before_ = 0, total_ = 0;
};

TEST_F(BadHandle, ContextFunctionsAnswerInvalidContext) {
  CUcontext destroyed = nullptr;
  ASSERT_EQ(cuCtxCreate(&destroyed, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy(destroyed), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  const auto contexts = bad<CUcontext>(destroyed, {{"a live stream", as<CUcontext>(stream_)},
                                                   {"a live event", as<CUcontext>(event_)}});
  using Call = std::function<CUresult(CUcontext)>;
  const std::pair<const char*, Call> calls[] = {
      {"cuCtxSetCurrent", [](CUcontext c) { return cuCtxSetCurrent(c); }},
      {"cuCtxPushCurrent_v2", [](CUcontext c) { return cuCtxPushCurrent_v2(c); }},
      {"cuCtxDestroy_v2", [](CUcontext c) { return cuCtxDestroy_v2(c); }},
      {"cuCtxGetDevice_v2",
       [](CUcontext c) {
         CUdevice dev;
         return cuCtxGetDevice_v2(&dev, c);
       }},
      {"cuCtxSynchronize_v2", [](CUcontext c) { return cuCtxSynchronize_v2(c); }},
      {"cuCtxGetId",
       [](CUcontext c) {
         unsigned long long id;
         return cuCtxGetId(c, &id);
       }},
      {"cuCtxGetApiVersion",
       [](CUcontext c) {
         unsigned version;
         return cuCtxGetApiVersion(c, &version);
       }},
      {"cuCtxEnablePeerAccess", [](CUcontext c) { return cuCtxEnablePeerAccess(c, 0); }},
  };
  for (const auto& [what, call] : calls) {
    expect_refused<CUcontext>(what, contexts, CUDA_ERROR_INVALID_CONTEXT, call);
  }
  // None of them changed the calling thread's current context.
  CUcontext current = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx_);
}

TEST_F(BadHandle, StreamArgumentsAnswerInvalidHandle) {
  const auto streams = bad_streams();
  const CUdeviceptr buffer = buffer_;
  const CUevent event = event_;
  const CUfunction noop = noop_;
  using Call = std::function<CUresult(CUstream)>;
  const std::pair<const char*, Call> calls[] = {
      {"cuStreamSynchronize", [](CUstream s) { return cuStreamSynchronize(s); }},
      {"cuStreamQuery", [](CUstream s) { return cuStreamQuery(s); }},
      {"cuStreamDestroy_v2", [](CUstream s) { return cuStreamDestroy_v2(s); }},
      {"cuStreamGetFlags",
       [](CUstream s) {
         unsigned flags;
         return cuStreamGetFlags(s, &flags);
       }},
      {"cuStreamWaitEvent", [=](CUstream s) { return cuStreamWaitEvent(s, event, 0); }},
      {"cuLaunchKernel",
       [=](CUstream s) { return cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr); }},
      {"cuLaunchHostFunc",
       [](CUstream s) {
         return cuLaunchHostFunc(
             s, [](void*) {}, nullptr);
       }},
      {"cuEventRecord", [=](CUstream s) { return cuEventRecord(event, s); }},
      {"cuMemcpyAsync", [=](CUstream s) { return cuMemcpyAsync(buffer, buffer + 4096, 4096, s); }},
      {"cuMemsetD8Async", [=](CUstream s) { return cuMemsetD8Async(buffer, 7, 4096, s); }},
      {"cuMemAllocAsync",
       [](CUstream s) {
         CUdeviceptr p = 0;
         return cuMemAllocAsync(&p, 1 << 20, s);
       }},
  };
  for (const auto& [what, call] : calls) {
    expect_refused<CUstream>(what, streams, CUDA_ERROR_INVALID_HANDLE, call);
  }
  // The refused memset left the bytes alone (the stream is checked first).
  uint8_t byte = 0xff;
  ASSERT_EQ(cuMemsetD8(buffer_, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(buffer_, 7, 1, streams[0].second), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuMemcpyDtoH(&byte, buffer_, 1), CUDA_SUCCESS);
  EXPECT_EQ(byte, 0);
  // The built-in handles stay valid.
  for (CUstream builtin : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    EXPECT_EQ(cuStreamSynchronize(builtin), CUDA_SUCCESS);
    EXPECT_EQ(cuLaunchKernel(noop_, 1, 1, 1, 1, 1, 1, 0, builtin, nullptr, nullptr), CUDA_SUCCESS);
  }
}

TEST_F(BadHandle, EventArgumentsAnswerInvalidHandle) {
  CUevent destroyed = nullptr;
  ASSERT_EQ(cuEventCreate(&destroyed, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventDestroy(destroyed), CUDA_SUCCESS);
  const auto events = bad<CUevent>(
      destroyed, {{"a live stream", as<CUevent>(stream_)}, {"a live context", as<CUevent>(ctx_)}});
  ASSERT_EQ(cuEventRecord(event_, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(event_), CUDA_SUCCESS);
  const CUevent good = event_;
  using Call = std::function<CUresult(CUevent)>;
  const std::pair<const char*, Call> calls[] = {
      {"cuEventRecord", [](CUevent e) { return cuEventRecord(e, nullptr); }},
      {"cuEventRecordWithFlags", [](CUevent e) { return cuEventRecordWithFlags(e, nullptr, 0); }},
      {"cuEventQuery", [](CUevent e) { return cuEventQuery(e); }},
      {"cuEventSynchronize", [](CUevent e) { return cuEventSynchronize(e); }},
      {"cuEventElapsedTime (start)",
       [=](CUevent e) {
         float ms;
         return cuEventElapsedTime(&ms, e, good);
       }},
      {"cuEventElapsedTime_v2 (end)",
       [=](CUevent e) {
         float ms;
         return cuEventElapsedTime_v2(&ms, good, e);
       }},
      {"cuStreamWaitEvent", [](CUevent e) { return cuStreamWaitEvent(nullptr, e, 0); }},
      {"cuEventDestroy_v2", [](CUevent e) { return cuEventDestroy_v2(e); }},
  };
  for (const auto& [what, call] : calls) {
    expect_refused<CUevent>(what, events, CUDA_ERROR_INVALID_HANDLE, call);
  }
}

TEST_F(BadHandle, ModuleAndFunctionArgumentsAnswerInvalidHandle) {
  CUlibrary library = nullptr;  // made first: see kFreedAddressesMayBeReused
  ASSERT_EQ(cuLibraryLoadData(&library, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  CUmodule unloaded = nullptr;
  CUfunction stale = nullptr;
  ASSERT_EQ(cuModuleLoadData(&unloaded, kPtx), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&stale, unloaded, "noop"), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleUnload(unloaded), CUDA_SUCCESS);

  const auto modules = bad<CUmodule>(
      unloaded, {{"a live event", as<CUmodule>(event_)}, {"a live function", as<CUmodule>(noop_)}});
  expect_refused<CUmodule>("cuModuleGetFunction", modules, CUDA_ERROR_INVALID_HANDLE,
                           [](CUmodule m) {
                             CUfunction f;
                             return cuModuleGetFunction(&f, m, "noop");
                           });
  expect_refused<CUmodule>("cuModuleGetGlobal_v2", modules, CUDA_ERROR_INVALID_HANDLE,
                           [](CUmodule m) {
                             CUdeviceptr p;
                             size_t bytes;
                             return cuModuleGetGlobal_v2(&p, &bytes, m, "x");
                           });
  auto unloadable = modules;  // a library is unloaded by cuLibraryUnload only
  unloadable.emplace_back("a live library", as<CUmodule>(library));
  expect_refused<CUmodule>("cuModuleUnload", unloadable, CUDA_ERROR_INVALID_HANDLE,
                           [](CUmodule m) { return cuModuleUnload(m); });

  const auto functions = bad<CUfunction>(stale, {{"a live module", as<CUfunction>(module_)},
                                                 {"a live event", as<CUfunction>(event_)}});
  expect_refused<CUfunction>("cuFuncGetAttribute", functions, CUDA_ERROR_INVALID_HANDLE,
                             [](CUfunction f) {
                               int v;
                               return cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f);
                             });
  expect_refused<CUfunction>(
      "cuFuncSetAttribute", functions, CUDA_ERROR_INVALID_HANDLE, [](CUfunction f) {
        return cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0);
      });
  expect_refused<CUfunction>(
      "cuLaunchKernel", functions, CUDA_ERROR_INVALID_HANDLE, [](CUfunction f) {
        return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
      });
  EXPECT_EQ(cuLibraryUnload(library), CUDA_SUCCESS);
}

TEST_F(BadHandle, LibraryAndKernelArgumentsAnswerInvalidHandle) {
  CUlibrary unloaded = nullptr;
  CUkernel stale = nullptr;
  ASSERT_EQ(cuLibraryLoadData(&unloaded, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  ASSERT_EQ(cuLibraryGetKernel(&stale, unloaded, "noop"), CUDA_SUCCESS);
  ASSERT_EQ(cuLibraryUnload(unloaded), CUDA_SUCCESS);

  const auto libraries = bad<CUlibrary>(unloaded, {{"a live module", as<CUlibrary>(module_)},
                                                   {"a live stream", as<CUlibrary>(stream_)}});
  expect_refused<CUlibrary>("cuLibraryGetKernel", libraries, CUDA_ERROR_INVALID_HANDLE,
                            [](CUlibrary l) {
                              CUkernel k;
                              return cuLibraryGetKernel(&k, l, "noop");
                            });
  expect_refused<CUlibrary>("cuLibraryGetModule", libraries, CUDA_ERROR_INVALID_HANDLE,
                            [](CUlibrary l) {
                              CUmodule m;
                              return cuLibraryGetModule(&m, l);
                            });
  expect_refused<CUlibrary>("cuLibraryUnload", libraries, CUDA_ERROR_INVALID_HANDLE,
                            [](CUlibrary l) { return cuLibraryUnload(l); });

  const auto kernels = bad<CUkernel>(stale, {{"a live event", as<CUkernel>(event_)}});
  expect_refused<CUkernel>("cuKernelGetFunction", kernels, CUDA_ERROR_INVALID_HANDLE,
                           [](CUkernel k) {
                             CUfunction f;
                             return cuKernelGetFunction(&f, k);
                           });
}

TEST_F(BadHandle, ArrayArgumentsAnswerInvalidHandle) {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = 64;
  desc.Height = 64;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 1;
  CUarray array = nullptr, destroyed = nullptr;
  CUmipmappedArray mipmap = nullptr, destroyed_mipmap = nullptr;
  ASSERT_EQ(cuArray3DCreate(&array, &desc), CUDA_SUCCESS);  // see kFreedAddressesMayBeReused
  ASSERT_EQ(cuMipmappedArrayCreate(&mipmap, &desc, 2), CUDA_SUCCESS);
  ASSERT_EQ(cuArray3DCreate(&destroyed, &desc), CUDA_SUCCESS);
  ASSERT_EQ(cuArrayDestroy(destroyed), CUDA_SUCCESS);
  ASSERT_EQ(cuMipmappedArrayCreate(&destroyed_mipmap, &desc, 2), CUDA_SUCCESS);
  ASSERT_EQ(cuMipmappedArrayDestroy(destroyed_mipmap), CUDA_SUCCESS);

  const auto arrays = bad<CUarray>(destroyed, {{"a live mipmapped array", as<CUarray>(mipmap)},
                                               {"a live event", as<CUarray>(event_)}});
  expect_refused<CUarray>("cuArrayGetDescriptor_v2", arrays, CUDA_ERROR_INVALID_HANDLE,
                          [](CUarray a) {
                            CUDA_ARRAY_DESCRIPTOR d;
                            return cuArrayGetDescriptor_v2(&d, a);
                          });
  expect_refused<CUarray>("cuArray3DGetDescriptor_v2", arrays, CUDA_ERROR_INVALID_HANDLE,
                          [](CUarray a) {
                            CUDA_ARRAY3D_DESCRIPTOR d;
                            return cuArray3DGetDescriptor_v2(&d, a);
                          });
  expect_refused<CUarray>("cuArrayGetMemoryRequirements", arrays, CUDA_ERROR_INVALID_VALUE,
                          [](CUarray a) {
                            CUDA_ARRAY_MEMORY_REQUIREMENTS req;
                            return cuArrayGetMemoryRequirements(&req, a, 0);
                          });
  expect_refused<CUarray>("cuArrayDestroy", arrays, CUDA_ERROR_INVALID_HANDLE,
                          [](CUarray a) { return cuArrayDestroy(a); });

  const auto mipmaps =
      bad<CUmipmappedArray>(destroyed_mipmap, {{"a live array", as<CUmipmappedArray>(array)}});
  expect_refused<CUmipmappedArray>("cuMipmappedArrayGetMemoryRequirements", mipmaps,
                                   CUDA_ERROR_INVALID_VALUE, [](CUmipmappedArray m) {
                                     CUDA_ARRAY_MEMORY_REQUIREMENTS req;
                                     return cuMipmappedArrayGetMemoryRequirements(&req, m, 0);
                                   });
  expect_refused<CUmipmappedArray>("cuMipmappedArrayDestroy", mipmaps, CUDA_ERROR_INVALID_HANDLE,
                                   [](CUmipmappedArray m) { return cuMipmappedArrayDestroy(m); });

  EXPECT_EQ(cuArrayDestroy(array), CUDA_SUCCESS);
  EXPECT_EQ(cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);
}

TEST_F(BadHandle, GraphArgumentsAnswerInvalidValue) {
  CUgraph graph = nullptr, destroyed = nullptr;
  CUgraphExec exec = nullptr, destroyed_exec = nullptr;
  CUgraphNode node = nullptr, destroyed_node = nullptr;
  ASSERT_EQ(cuGraphCreate(&graph, 0), CUDA_SUCCESS);  // see kFreedAddressesMayBeReused
  ASSERT_EQ(cuGraphAddEmptyNode(&node, graph, nullptr, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphCreate(&destroyed, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphAddEmptyNode(&destroyed_node, destroyed, nullptr, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphInstantiateWithFlags(&destroyed_exec, destroyed, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphExecDestroy(destroyed_exec), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphDestroy(destroyed), CUDA_SUCCESS);

  const auto graphs = bad<CUgraph>(destroyed, {{"a live graph exec", as<CUgraph>(exec)},
                                               {"a live graph node", as<CUgraph>(node)}});
  expect_refused<CUgraph>("cuGraphGetNodes", graphs, CUDA_ERROR_INVALID_VALUE, [](CUgraph g) {
    size_t n = 0;
    return cuGraphGetNodes(g, nullptr, &n);
  });
  expect_refused<CUgraph>("cuGraphAddEmptyNode", graphs, CUDA_ERROR_INVALID_VALUE, [](CUgraph g) {
    CUgraphNode n;
    return cuGraphAddEmptyNode(&n, g, nullptr, 0);
  });
  expect_refused<CUgraph>("cuGraphInstantiateWithFlags", graphs, CUDA_ERROR_INVALID_VALUE,
                          [](CUgraph g) {
                            CUgraphExec e;
                            return cuGraphInstantiateWithFlags(&e, g, 0);
                          });
  expect_refused<CUgraph>("cuGraphDestroy", graphs, CUDA_ERROR_INVALID_VALUE,
                          [](CUgraph g) { return cuGraphDestroy(g); });

  const auto execs = bad<CUgraphExec>(
      destroyed_exec,
      {{"a live graph", as<CUgraphExec>(graph)}, {"a live stream", as<CUgraphExec>(stream_)}});
  const CUstream stream = stream_;
  expect_refused<CUgraphExec>("cuGraphLaunch", execs, CUDA_ERROR_INVALID_VALUE,
                              [=](CUgraphExec e) { return cuGraphLaunch(e, stream); });
  expect_refused<CUgraphExec>("cuGraphUpload", execs, CUDA_ERROR_INVALID_VALUE,
                              [=](CUgraphExec e) { return cuGraphUpload(e, stream); });
  expect_refused<CUgraphExec>("cuGraphExecDestroy", execs, CUDA_ERROR_INVALID_VALUE,
                              [](CUgraphExec e) { return cuGraphExecDestroy(e); });

  const auto nodes = bad<CUgraphNode>(destroyed_node, {{"a live graph", as<CUgraphNode>(graph)}});
  expect_refused<CUgraphNode>("cuGraphNodeGetType", nodes, CUDA_ERROR_INVALID_VALUE,
                              [](CUgraphNode n) {
                                CUgraphNodeType type;
                                return cuGraphNodeGetType(n, &type);
                              });

  // A good exec on a bad stream is the stream's error.
  expect_refused<CUstream>("cuGraphLaunch (stream)", bad_streams(), CUDA_ERROR_INVALID_HANDLE,
                           [=](CUstream s) { return cuGraphLaunch(exec, s); });
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
}

TEST_F(BadHandle, PoolArgumentsAnswerInvalidValue) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool destroyed = nullptr;
  ASSERT_EQ(cuMemPoolCreate(&destroyed, &props), CUDA_SUCCESS);
  ASSERT_EQ(cuMemPoolDestroy(destroyed), CUDA_SUCCESS);
  const auto pools = bad<CUmemoryPool>(destroyed, {{"a live stream", as<CUmemoryPool>(stream_)},
                                                   {"a live event", as<CUmemoryPool>(event_)}});
  const CUstream stream = stream_;
  using Call = std::function<CUresult(CUmemoryPool)>;
  const std::pair<const char*, Call> calls[] = {
      {"cuMemPoolSetAttribute",
       [](CUmemoryPool p) {
         cuuint64_t v = 0;
         return cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
       }},
      {"cuMemPoolGetAttribute",
       [](CUmemoryPool p) {
         cuuint64_t v = 0;
         return cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v);
       }},
      {"cuMemAllocFromPoolAsync",
       [=](CUmemoryPool p) {
         CUdeviceptr ptr = 0;
         return cuMemAllocFromPoolAsync(&ptr, 1 << 20, p, stream);
       }},
      {"cuMemPoolTrimTo", [](CUmemoryPool p) { return cuMemPoolTrimTo(p, 0); }},
      {"cuDeviceSetMemPool", [](CUmemoryPool p) { return cuDeviceSetMemPool(0, p); }},
      {"cuMemPoolDestroy", [](CUmemoryPool p) { return cuMemPoolDestroy(p); }},
  };
  for (const auto& [what, call] : calls) {
    expect_refused<CUmemoryPool>(what, pools, CUDA_ERROR_INVALID_VALUE, call);
  }
}

TEST_F(BadHandle, VmmAllocationHandlesAnswerInvalidValue) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  constexpr size_t kGranule = 2 << 20;
  CUmemGenericAllocationHandle released = 0;
  ASSERT_EQ(cuMemCreate(&released, kGranule, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(released), CUDA_SUCCESS);
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
  const auto handles = bad<CUmemGenericAllocationHandle>(
      released, {{"a live pool", as<CUmemGenericAllocationHandle>(pool)},
                 {"a live event", as<CUmemGenericAllocationHandle>(event_)}});
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, kGranule, 0, 0, 0), CUDA_SUCCESS);
  expect_refused<CUmemGenericAllocationHandle>(
      "cuMemMap", handles, CUDA_ERROR_INVALID_VALUE,
      [=](CUmemGenericAllocationHandle h) { return cuMemMap(va, kGranule, 0, h, 0); });
  expect_refused<CUmemGenericAllocationHandle>(
      "cuMemGetAllocationPropertiesFromHandle", handles, CUDA_ERROR_INVALID_VALUE,
      [](CUmemGenericAllocationHandle h) {
        CUmemAllocationProp p;
        return cuMemGetAllocationPropertiesFromHandle(&p, h);
      });
  expect_refused<CUmemGenericAllocationHandle>(
      "cuMemRelease", handles, CUDA_ERROR_INVALID_VALUE,
      [](CUmemGenericAllocationHandle h) { return cuMemRelease(h); });
  EXPECT_EQ(cuMemAddressFree(va, kGranule), CUDA_SUCCESS);
}

}  // namespace
