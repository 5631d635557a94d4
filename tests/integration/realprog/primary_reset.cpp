// realprog.primary_reset: the primary context through cudaDeviceReset as the
// CUDA 13 runtime drives the driver.
//   - made current before its retain, which returns that same handle;
//   - half the quota allocated, the nvcc-built fatbin loaded and launched,
//     an allocation of the whole quota refused with CUDA_ERROR_OUT_OF_MEMORY;
//   - cuDevicePrimaryCtxReset with everything still allocated (the reset
//     frees it, as cudaDeviceReset does): the context is inactive, the handle
//     still current;
//   - the same handle made current and retained again, and the same work
//     again: half the quota fits again (the first half went with the reset),
//     the library (the process's) launches in the new context, the whole
//     quota is still refused.
// Usage: realprog_primary_reset QUOTA_BYTES KERNELS_FATBIN
#include "realprog.hpp"

using namespace realprog;

namespace {

// One life of the context: half the quota held (never written: fakegpu backs
// written memory with host pages), a small buffer copied in, the kernel
// launched on it, copied out.
void work(const Runtime& rt, CUlibrary lib, std::size_t quota) {
  CUdeviceptr half = 0, data = 0;
  RP_OK(rt.MemAlloc(&half, quota / 2));
  std::vector<float> host(1 << 14, 1.5f), back(host.size());
  const std::size_t bytes = host.size() * sizeof(float);
  RP_OK(rt.MemAlloc(&data, bytes));
  RP_OK(rt.MemcpyHtoD(data, host.data(), bytes));
  CUdeviceptr over = 0;
  RP_EXPECT(CUDA_ERROR_OUT_OF_MEMORY, rt.MemAlloc(&over, quota));

  CUkernel kernel = nullptr;
  RP_OK(rt.LibraryGetKernel(&kernel, lib, "vec_add"));
  CUdeviceptr scale = 0;
  std::size_t scale_bytes = 0;
  RP_OK(rt.LibraryGetGlobal(&scale, &scale_bytes, lib, "scale"));
  check(scale_bytes == sizeof(float), "cuLibraryGetGlobal(scale): wrong size");
  int n = static_cast<int>(host.size());
  void* params[] = {&data, &data, &data, &n};
  for (int i = 0; i < 2; ++i)
    RP_LAUNCH(rt.LaunchKernel(reinterpret_cast<CUfunction>(kernel), 64, 1, 1, 256, 1, 1, 0, nullptr,
                              params, nullptr));
  RP_OK(rt.CtxSynchronize());
  RP_OK(rt.MemcpyDtoH(back.data(), data, bytes));
  // Unchanged on fakegpu (kernels are no-ops); on hardware scale × (x + x)
  // twice over: 1.5 → 6 → 24.
  check(back[0] == host[0] || back[0] == 24.0f, "the buffer did not come back");
}

}  // namespace

int main(int argc, char** argv) {
  const OneImageProgram program(argc, argv);
  const Runtime& rt = program.rt;

  // The runtime's lazy load at the first launch; the library is the process's.
  const CUlibrary lib = program.load_library();
  work(rt, lib, program.quota);

  // cudaDeviceReset, with the allocation still live.
  RP_OK(rt.DevicePrimaryCtxReset(program.dev));
  unsigned flags = 0;
  int active = 1;
  RP_OK(rt.DevicePrimaryCtxGetState(program.dev, &flags, &active));
  check(active == 0, "the primary context is still active after its reset");
  CUcontext current = nullptr;
  RP_OK(rt.CtxGetCurrent(&current));
  check(current == program.ctx, "the reset changed the current context");

  // The runtime's next call: the same program.ctx, current again, retained again.
  RP_OK(rt.CtxSetCurrent(program.ctx));
  CUcontext again = nullptr;
  RP_OK(rt.DevicePrimaryCtxRetain(&again, program.dev));
  check(again == program.ctx, "the retain after the reset returned a new handle");
  RP_OK(rt.DevicePrimaryCtxGetState(program.dev, &flags, &active));
  check(active == 1, "the primary context is inactive after its retain");
  work(rt, lib, program.quota);

  RP_OK(rt.LibraryUnload(lib));
  RP_OK(rt.DevicePrimaryCtxRelease(program.dev));
  return report();
}
