// realprog.jit_link: the JIT linker on nvcc's relocatable PTX (link_main.cu
// calls a function link_lib.cu defines), through the entry points a CUDA 13
// runtime resolves for it.
//   - the primary context the runtime's way; the quota: an allocation of the
//     whole quota is refused with CUDA_ERROR_OUT_OF_MEMORY;
//   - cuLinkCreate with log buffers, cuLinkAddData of both PTX units,
//     cuLinkComplete: one cubin, which cuModuleLoadData loads; the kernel and
//     the other unit's global are found in it; the linker destroyed after the
//     load (it owns the cubin);
//   - the kernel launched on device buffers that round-trip.
// Usage: realprog_jit_link QUOTA_BYTES LINK_MAIN_PTX LINK_LIB_PTX
#include <cstring>

#include "realprog.hpp"

using namespace realprog;

int main(int argc, char** argv) {
  const std::size_t quota = quota_arg(argc, argv, 2);
  const std::vector<char> main_ptx = read_file(argv[2], true);
  const std::vector<char> lib_ptx = read_file(argv[3], true);
  const Runtime rt;
  const CUdevice dev = rt.init();
  rt.start(dev);
  CUdeviceptr over = 0;
  RP_EXPECT(CUDA_ERROR_OUT_OF_MEMORY, rt.MemAlloc(&over, quota));

  char info[4096] = {}, error[4096] = {};
  CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {info, reinterpret_cast<void*>(sizeof info), error,
                    reinterpret_cast<void*>(sizeof error)};
  CUlinkState link = nullptr;
  RP_OK(rt.LinkCreate(4, options, values, &link));
  RP_OK(rt.LinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(main_ptx.data()), main_ptx.size(),
                       "link_main.ptx", 0, nullptr, nullptr));
  RP_OK(rt.LinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(lib_ptx.data()), lib_ptx.size(),
                       "link_lib.ptx", 0, nullptr, nullptr));
  void* cubin = nullptr;
  std::size_t cubin_bytes = 0;
  const CUresult linked = rt.LinkComplete(link, &cubin, &cubin_bytes);
  if (linked != CUDA_SUCCESS) fail("cuLinkComplete: " + name_of(linked) + ": " + error);
  ++checked;
  check(cubin != nullptr && cubin_bytes > 4 &&
            std::memcmp(cubin,
                        "\x7f"
                        "ELF",
                        4) == 0,
        "cuLinkComplete did not produce an ELF cubin");
  check(std::memchr(info, '\0', sizeof info) && std::memchr(error, '\0', sizeof error),
        "a JIT log is not terminated");

  CUmodule module = nullptr;
  RP_OK(rt.ModuleLoadData(&module, cubin));
  RP_OK(rt.LinkDestroy(link));
  CUfunction f = nullptr;
  RP_OK(rt.ModuleGetFunction(&f, module, "vec_scale"));
  CUdeviceptr factor = 0;
  std::size_t factor_bytes = 0;
  RP_OK(rt.ModuleGetGlobal(&factor, &factor_bytes, module, "link_factor"));
  check(factor_bytes == sizeof(float), "link_factor: " + std::to_string(factor_bytes) + " bytes");

  constexpr int n = 4096;
  constexpr std::size_t bytes = n * sizeof(float);
  std::vector<float> host(n), out(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  CUdeviceptr a = 0, c = 0;
  RP_OK(rt.MemAlloc(&a, bytes));
  RP_OK(rt.MemAlloc(&c, bytes));
  RP_OK(rt.MemcpyHtoD(a, host.data(), bytes));
  RP_OK(rt.MemcpyHtoD(c, host.data(), bytes));
  int count = n;
  void* params[] = {&a, &c, &count};
  for (int i = 0; i < 4; ++i)
    RP_LAUNCH(rt.LaunchKernel(f, n / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  RP_OK(rt.CtxSynchronize());
  // Unchanged on fakegpu (kernels are no-ops), 3 × the input on hardware.
  RP_OK(rt.MemcpyDtoH(out.data(), c, bytes));
  for (int i = 0; i < n; ++i)
    if (out[i] != host[i] && out[i] != 3.0f * host[i])
      fail("element " + std::to_string(i) + " of the output did not come back");

  RP_OK(rt.MemFree(a));
  RP_OK(rt.MemFree(c));
  RP_OK(rt.ModuleUnload(module));
  RP_OK(rt.DevicePrimaryCtxRelease(dev));
  return report();
}
