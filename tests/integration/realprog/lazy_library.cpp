// realprog.lazy_library: what a CUDA 13 runtime program does around its
// first kernel launch, on an nvcc-built fatbin (kernels.cu).
//   - the primary context the runtime's way (current before its retain);
//   - device buffers, then the program.quota: one allocation of the whole program.quota on
//     top of them is refused with CUDA_ERROR_OUT_OF_MEMORY;
//   - the fatbin loaded lazily with cuLibraryLoadData at the first launch,
//     the kernel taken with cuLibraryGetKernel and its CUkernel passed as the
//     CUfunction of cuLaunchKernel, cuLaunchKernel_ptsz, cuLaunchKernelEx and
//     cuLaunchKernelEx_ptsz (on the NULL stream and on a created stream);
//   - the __device__ global found with cuLibraryGetGlobal (its size), written
//     and read back; the buffers round-trip through the device.
// Usage: realprog_lazy_library QUOTA_BYTES KERNELS_FATBIN
#include "realprog.hpp"

using namespace realprog;

int main(int argc, char** argv) {
  const OneImageProgram program(argc, argv);
  const Runtime& rt = program.rt;

  constexpr int n = 1 << 16;
  constexpr std::size_t bytes = n * sizeof(float);
  std::vector<float> a(n), b(n), out(n, -1.0f);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = static_cast<float>(2 * i);
  }
  CUdeviceptr da = 0, db = 0, dc = 0;
  RP_OK(rt.MemAlloc(&da, bytes));
  RP_OK(rt.MemAlloc(&db, bytes));
  RP_OK(rt.MemAlloc(&dc, bytes));
  CUdeviceptr over = 0;
  RP_EXPECT(CUDA_ERROR_OUT_OF_MEMORY, rt.MemAlloc(&over, program.quota));
  RP_OK(rt.MemcpyHtoD(da, a.data(), bytes));
  RP_OK(rt.MemcpyHtoD(db, b.data(), bytes));
  RP_OK(rt.MemcpyHtoD(dc, a.data(), bytes));

  // The first launch: the runtime loads the program's fatbin now.
  CUlibrary lib = nullptr;
  RP_OK(rt.LibraryLoadData(&lib, program.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel kernel = nullptr;
  RP_OK(rt.LibraryGetKernel(&kernel, lib, "vec_add"));
  RP_EXPECT(CUDA_ERROR_NOT_FOUND, rt.LibraryGetKernel(&kernel, lib, "no_such_kernel"));
  RP_OK(rt.LibraryGetKernel(&kernel, lib, "vec_add"));
  CUdeviceptr scale = 0;
  std::size_t scale_bytes = 0;
  RP_OK(rt.LibraryGetGlobal(&scale, &scale_bytes, lib, "scale"));
  check(scale != 0 && scale_bytes == sizeof(float),
        "cuLibraryGetGlobal(scale): " + std::to_string(scale_bytes) + " bytes");
  const float three = 3.0f;
  float back = 0.0f;
  RP_OK(rt.MemcpyHtoD(scale, &three, sizeof three));
  RP_OK(rt.MemcpyDtoH(&back, scale, sizeof back));
  check(back == three, "the global does not read back what was written");

  const auto f = reinterpret_cast<CUfunction>(kernel);
  int count = n;
  void* params[] = {&da, &db, &dc, &count};
  const unsigned block = 256, grid = (n + block - 1) / block;
  RP_LAUNCH(rt.LaunchKernel(f, grid, 1, 1, block, 1, 1, 0, nullptr, params, nullptr));
  RP_LAUNCH(rt.LaunchKernel_ptsz(f, grid, 1, 1, block, 1, 1, 0, nullptr, params, nullptr));
  CUstream stream = nullptr;
  RP_OK(rt.StreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUlaunchConfig config{};
  config.gridDimX = grid;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = block;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  for (int i = 0; i < 3; ++i) RP_LAUNCH(rt.LaunchKernelEx(&config, f, params, nullptr));
  config.hStream = nullptr;
  RP_LAUNCH(rt.LaunchKernelEx_ptsz(&config, f, params, nullptr));
  RP_OK(rt.StreamSynchronize(stream));
  RP_OK(rt.CtxSynchronize());

  // fakegpu runs kernels as timed no-ops: the output buffer holds what was
  // copied in (on hardware, the sums); either way it comes back whole.
  RP_OK(rt.MemcpyDtoH(out.data(), dc, bytes));
  for (int i = 0; i < n; ++i)
    if (out[i] != a[i] && out[i] != three * (a[i] + b[i]))
      fail("element " + std::to_string(i) + " of the output did not come back");

  RP_OK(rt.StreamDestroy(stream));
  RP_OK(rt.LibraryUnload(lib));
  for (CUdeviceptr p : {da, db, dc}) RP_OK(rt.MemFree(p));
  RP_OK(rt.DevicePrimaryCtxRelease(program.dev));
  return report();
}
