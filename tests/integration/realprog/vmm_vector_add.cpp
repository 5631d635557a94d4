// realprog.vmm_vector_add: a vector add on virtual-memory-management
// allocations, as NVIDIA's vectorAddMMAP sample does it, linked with -lcuda.
//   - the quota: cuMemCreate of the whole quota is refused with
//     CUDA_ERROR_OUT_OF_MEMORY;
//   - one address reservation, three cuMemCreate allocations mapped into it
//     side by side and released at once (the mappings keep them), read-write
//     access for the device over the range;
//   - the inputs copied in, the nvcc-built fatbin's kernel (cuModuleLoadData,
//     cuModuleGetFunction) launched on the mapped addresses, the output and
//     the inputs copied out;
//   - unmapped and the reservation freed.
// Usage: realprog_vmm_vector_add QUOTA_BYTES KERNELS_FATBIN
#include "realprog.hpp"

using namespace realprog;

int main(int argc, char** argv) {
  const std::size_t quota = quota_arg(argc, argv, 1);
  const std::vector<char> fatbin = read_file(argv[2]);
  RP_OK(cuInit(0));
  CUdevice dev = 0;
  RP_OK(cuDeviceGet(&dev, 0));
  int vmm = 0;
  RP_OK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  check(vmm == 1, "the device does not support virtual memory management");
  CUcontext ctx = nullptr;
  RP_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
  RP_OK(cuCtxSetCurrent(ctx));

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  std::size_t granularity = 0;
  RP_OK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  check(granularity > 0 && quota % granularity == 0, "granularity " + std::to_string(granularity));

  CUmemGenericAllocationHandle over = 0;
  RP_EXPECT(CUDA_ERROR_OUT_OF_MEMORY, cuMemCreate(&over, quota, &prop, 0));

  constexpr int n = 1 << 20;
  constexpr std::size_t bytes = n * sizeof(float);
  const std::size_t size = (bytes + granularity - 1) / granularity * granularity;
  CUdeviceptr base = 0;
  RP_OK(cuMemAddressReserve(&base, 3 * size, 0, 0, 0));
  for (int i = 0; i < 3; ++i) {
    CUmemGenericAllocationHandle h = 0;
    RP_OK(cuMemCreate(&h, size, &prop, 0));
    RP_OK(cuMemMap(base + i * size, size, 0, h, 0));
    RP_OK(cuMemRelease(h));
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  RP_OK(cuMemSetAccess(base, 3 * size, &access, 1));
  CUdeviceptr a = base, b = base + size, c = base + 2 * size;

  std::vector<float> ha(n), hb(n), hc(n, -1.0f);
  for (int i = 0; i < n; ++i) {
    ha[i] = static_cast<float>(i % 1000);
    hb[i] = static_cast<float>(1000 - i % 1000);
  }
  RP_OK(cuMemcpyHtoD(a, ha.data(), bytes));
  RP_OK(cuMemcpyHtoD(b, hb.data(), bytes));
  RP_OK(cuMemsetD32(c, 0, n));

  CUmodule module = nullptr;
  RP_OK(cuModuleLoadData(&module, fatbin.data()));
  CUfunction f = nullptr;
  RP_OK(cuModuleGetFunction(&f, module, "vec_add"));
  int count = n;
  void* params[] = {&a, &b, &c, &count};
  const unsigned block = 256, grid = (n + block - 1) / block;
  for (int i = 0; i < 10; ++i)
    RP_LAUNCH(cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, nullptr, params, nullptr));
  RP_OK(cuCtxSynchronize());

  // fakegpu's kernels are no-ops: the output is the memset's zeros there and
  // the sums (2000.0f) on hardware; the inputs round-trip either way.
  std::vector<float> ra(n), rb(n);
  RP_OK(cuMemcpyDtoH(hc.data(), c, bytes));
  RP_OK(cuMemcpyDtoH(ra.data(), a, bytes));
  RP_OK(cuMemcpyDtoH(rb.data(), b, bytes));
  for (int i = 0; i < n; ++i) {
    if (ra[i] != ha[i] || rb[i] != hb[i])
      fail("input element " + std::to_string(i) + " did not round-trip");
    if (hc[i] != 0.0f && hc[i] != 2000.0f)
      fail("output element " + std::to_string(i) + " is " + std::to_string(hc[i]));
  }

  RP_OK(cuModuleUnload(module));
  RP_OK(cuMemUnmap(base, 3 * size));
  RP_OK(cuMemAddressFree(base, 3 * size));
  RP_OK(cuDevicePrimaryCtxRelease(dev));
  return report();
}
