// Shared by the real-program tests' Driver-API programs (realprog.*): the
// driver's entry points resolved the way NVIDIA's CUDA 13 runtime resolves
// them (cuGetProcAddress at the ABI version and flags it asks for, as
// tests/data/cudart13-proc-lookups.txt lists), its primary-context sequence,
// checks that name the failing call, and the JSON line each program ends with.
// A program exits 0 only when every driver result it checks is the expected
// one; the harness (realprog.py) checks the rest against the gate's counters
// and fakegpu's ground truth.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace realprog {

inline unsigned checked = 0;   // driver results checked
inline unsigned launches = 0;  // kernels launched successfully
inline unsigned refusals = 0;  // allocations refused with CUDA_ERROR_OUT_OF_MEMORY

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  std::exit(1);
}

inline std::string name_of(CUresult r) {
  const char* n = nullptr;
  return cuGetErrorName(r, &n) == CUDA_SUCCESS && n ? n : "CUresult " + std::to_string(r);
}

inline void expect(CUresult got, CUresult want, const char* call) {
  if (got != want)
    fail(std::string(call) + " returned " + name_of(got) + ", expected " + name_of(want));
  ++checked;
  if (want == CUDA_ERROR_OUT_OF_MEMORY) ++refusals;
}

inline void check(bool cond, const std::string& what) {
  if (!cond) fail(what);
  ++checked;
}

#define RP_OK(call) ::realprog::expect((call), CUDA_SUCCESS, #call)
#define RP_EXPECT(want, call) ::realprog::expect((call), (want), #call)
#define RP_LAUNCH(call) (RP_OK(call), ++::realprog::launches)

// An entry point as the runtime gets it: through cuGetProcAddress (the
// shim's, when it is preloaded) at exactly that cudaVersion and flags.
template <class Fn>
Fn resolve(const char* symbol, int cuda_version, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult rc = cuGetProcAddress(symbol, &fn, cuda_version, flags, &found);
  if (rc != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || !fn)
    fail(std::string("cuGetProcAddress(") + symbol + ", " + std::to_string(cuda_version) +
         ", flags " + std::to_string(flags) + "): " + name_of(rc) + ", found " +
         std::to_string(found));
  return reinterpret_cast<Fn>(fn);
}

// The entry points the programs use, at the runtime's (version, flags). The
// members drop the "cu" (cuda.h's macros rename several of the names). Where
// cudaTypedefs.h declares an old ABI's type only for the driver's own build
// (the 7.0 primary-context release and reset, the 5.5 linker), the newer
// ABI's type has the same signature.
struct Runtime {
  static constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
#define RP_ENTRY_AS(member, symbol, version, type, flags) \
  type member = resolve<type>(symbol, version, flags)
#define RP_ENTRY(name, version) RP_ENTRY_AS(name, "cu" #name, version, PFN_cu##name##_v##version, 0)
  RP_ENTRY(Init, 2000);
  RP_ENTRY(DeviceGet, 2000);
  RP_ENTRY(CtxSetCurrent, 4000);
  RP_ENTRY(CtxGetCurrent, 4000);
  RP_ENTRY(CtxSynchronize, 2000);
  RP_ENTRY(DevicePrimaryCtxRetain, 7000);
  RP_ENTRY_AS(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 7000,
              PFN_cuDevicePrimaryCtxRelease_v11000, 0);
  RP_ENTRY_AS(DevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", 7000,
              PFN_cuDevicePrimaryCtxReset_v11000, 0);
  RP_ENTRY(DevicePrimaryCtxGetState, 7000);
  RP_ENTRY(MemAlloc, 3020);
  RP_ENTRY(MemFree, 3020);
  RP_ENTRY(MemcpyHtoD, 3020);
  RP_ENTRY(MemcpyDtoH, 3020);
  RP_ENTRY(StreamCreate, 2000);
  RP_ENTRY(StreamDestroy, 4000);
  RP_ENTRY(StreamSynchronize, 2000);
  RP_ENTRY(LibraryLoadData, 12000);
  RP_ENTRY(LibraryGetKernel, 12000);
  RP_ENTRY(LibraryGetGlobal, 12000);
  RP_ENTRY(LibraryUnload, 12000);
  RP_ENTRY(LaunchKernel, 4000);
  RP_ENTRY(StreamBeginCapture, 10010);
  RP_ENTRY(StreamEndCapture, 10000);
  RP_ENTRY(StreamIsCapturing, 10000);
  RP_ENTRY(StreamWaitEvent, 3020);
  RP_ENTRY(EventCreate, 2000);
  RP_ENTRY(EventRecord, 2000);
  RP_ENTRY(EventDestroy, 4000);
  RP_ENTRY(GraphInstantiateWithFlags, 11040);
  RP_ENTRY(GraphLaunch, 10000);
  RP_ENTRY(GraphExecDestroy, 10000);
  RP_ENTRY(GraphDestroy, 10000);
  RP_ENTRY(DeviceGraphMemTrim, 11040);
  RP_ENTRY(MemAllocAsync, 11020);
  RP_ENTRY(MemFreeAsync, 11020);
  RP_ENTRY(LaunchKernelEx, 11060);
  RP_ENTRY(ModuleLoadData, 2000);
  RP_ENTRY(ModuleGetFunction, 2000);
  RP_ENTRY(ModuleGetGlobal, 3020);
  RP_ENTRY(ModuleUnload, 2000);
  RP_ENTRY_AS(LinkCreate, "cuLinkCreate", 5050, PFN_cuLinkCreate_v6050, 0);
  RP_ENTRY_AS(LinkAddData, "cuLinkAddData", 5050, PFN_cuLinkAddData_v6050, 0);
  RP_ENTRY(LinkComplete, 5050);
  RP_ENTRY(LinkDestroy, 5050);
  // The per-thread default stream's forms, resolved up front as well.
  RP_ENTRY_AS(LaunchKernel_ptsz, "cuLaunchKernel", 7000, PFN_cuLaunchKernel_v7000_ptsz, kPerThread);
  RP_ENTRY_AS(LaunchKernelEx_ptsz, "cuLaunchKernelEx", 11060, PFN_cuLaunchKernelEx_v11060_ptsz,
              kPerThread);
#undef RP_ENTRY
#undef RP_ENTRY_AS

  // The primary context's handle before any retain. The runtime reads it
  // through a private interface of the driver; fakegpu's stand-in for that is
  // fakegpuPrivatePrimaryCtxGet. A driver without it (hardware) shows the
  // handle through a retain and a release: it outlives its last release.
  CUcontext primary_handle(CUdevice dev) const {
    using Get = CUresult (*)(CUcontext*, CUdevice);
    CUcontext ctx = nullptr;
    if (auto get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "fakegpuPrivatePrimaryCtxGet"))) {
      RP_OK(get(&ctx, dev));
    } else {
      RP_OK(DevicePrimaryCtxRetain(&ctx, dev));
      RP_OK(DevicePrimaryCtxRelease(dev));
    }
    check(ctx != nullptr, "no primary context handle");
    return ctx;
  }

  // cuInit and device 0.
  CUdevice init() const {
    RP_OK(Init(0));
    CUdevice dev = 0;
    RP_OK(DeviceGet(&dev, 0));
    return dev;
  }

  // The runtime's order: the primary context is made current first, then
  // retained, and the retain must hand back that same handle.
  CUcontext start(CUdevice dev) const {
    const CUcontext handle = primary_handle(dev);
    RP_OK(CtxSetCurrent(handle));
    CUcontext retained = nullptr;
    RP_OK(DevicePrimaryCtxRetain(&retained, dev));
    check(retained == handle,
          "cuDevicePrimaryCtxRetain returned another handle than the current one");
    CUcontext current = nullptr;
    RP_OK(CtxGetCurrent(&current));
    check(current == handle, "the primary context is not current after its retain");
    return handle;
  }
};

inline std::vector<char> read_file(const char* path, bool nul_terminated = false) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) fail(std::string("cannot read ") + path);
  if (bytes.empty()) fail(std::string(path) + " is empty or missing");
  if (nul_terminated) bytes.push_back('\0');
  return bytes;
}

// argv: the quota in bytes, then the images the program loads.
inline std::size_t quota_arg(int argc, char** argv, int images) {
  if (argc != 2 + images) {
    std::fprintf(stderr, "usage: %s QUOTA_BYTES IMAGE x%d\n", argv[0], images);
    std::exit(2);
  }
  return std::strtoull(argv[1], nullptr, 10);
}

// What a program of one image starts with: its arguments (the quota in
// bytes, the image), the entry points, device 0 and its primary context
// current and retained (the runtime's order).
struct OneImageProgram {
  std::size_t quota;
  std::vector<char> image;
  Runtime rt;
  CUdevice dev;
  CUcontext ctx;
  OneImageProgram(int argc, char** argv)
      : quota(quota_arg(argc, argv, 1)),
        image(read_file(argv[2])),
        dev(rt.init()),
        ctx(rt.start(dev)) {}
  // The image as the runtime loads it: a library of the process.
  CUlibrary load_library() const {
    CUlibrary lib = nullptr;
    RP_OK(rt.LibraryLoadData(&lib, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    return lib;
  }
};

// The program's last line: what the harness compares with the gate's counters.
inline int report() {
  std::printf("{\"launches\": %u, \"oom_refusals\": %u, \"checked\": %u}\n", launches, refusals,
              checked);
  return 0;
}

}  // namespace realprog
