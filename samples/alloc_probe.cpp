// alloc_probe: allocates device memory in steps through one allocation API until
// the driver says CUDA_ERROR_OUT_OF_MEMORY (or --max is reached), then prints
// one JSON line: bytes obtained and what cuMemGetInfo_v2 / cuDeviceTotalMem_v2
// reported before and after. Links only libcuda; runs on a GPU and on fakegpu.
#include <cuda.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "samples/common.hpp"

namespace {

struct View {
  size_t free = 0, total = 0, device_total = 0;
  CUresult info = CUDA_SUCCESS, total_result = CUDA_SUCCESS;
};

View view(CUdevice dev) {
  View v;
  v.info = cuMemGetInfo(&v.free, &v.total);
  v.total_result = cuDeviceTotalMem(&v.device_total, dev);
  return v;
}

nlohmann::json to_json(const View& v) {
  nlohmann::json j{{"free", v.free}, {"total", v.total}, {"device_total", v.device_total}};
  if (v.info != CUDA_SUCCESS) j["mem_get_info_error"] = samples::error_name(v.info);
  if (v.total_result != CUDA_SUCCESS)
    j["device_total_mem_error"] = samples::error_name(v.total_result);
  return j;
}

// One allocation made through the API under test, with what frees it.
struct Allocation {
  CUdeviceptr ptr = 0;
  CUarray array = nullptr;
  CUmemGenericAllocationHandle handle = 0;
  size_t size = 0;
};

class Allocator {
 public:
  Allocator(std::string api, CUdevice dev) : api_(std::move(api)), dev_(dev) {}

  CUresult setup() {
    if (api_ == "async" || api_ == "pool") {
      if (CUresult r = cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS)
        return r;
    }
    if (api_ == "pool") {
      CUmemPoolProps props{};
      props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      props.location.id = dev_;
      if (CUresult r = cuMemPoolCreate(&pool_, &props); r != CUDA_SUCCESS) return r;
    }
    if (api_ == "vmm") {
      CUmemAllocationProp prop = vmm_prop();
      if (CUresult r =
              cuMemGetAllocationGranularity(&granularity_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
          r != CUDA_SUCCESS) {
        return r;
      }
    }
    return CUDA_SUCCESS;
  }

  // Rounds a step to what the API can allocate.
  size_t round(size_t step) const {
    if (api_ == "vmm") return (step + granularity_ - 1) / granularity_ * granularity_;
    return step;
  }

  CUresult allocate(size_t step, Allocation& a) {
    a.size = step;
    if (api_ == "alloc") return cuMemAlloc(&a.ptr, step);
    if (api_ == "pitch") {
      size_t pitch = 0;
      const size_t width = 4096;
      CUresult r = cuMemAllocPitch(&a.ptr, &pitch, width, std::max<size_t>(step / width, 1), 16);
      if (r == CUDA_SUCCESS) a.size = pitch * std::max<size_t>(step / width, 1);
      return r;
    }
    if (api_ == "managed") return cuMemAllocManaged(&a.ptr, step, CU_MEM_ATTACH_GLOBAL);
    if (api_ == "async" || api_ == "pool") {
      CUresult r = api_ == "async" ? cuMemAllocAsync(&a.ptr, step, stream_)
                                   : cuMemAllocFromPoolAsync(&a.ptr, step, pool_, stream_);
      if (r == CUDA_SUCCESS) r = cuStreamSynchronize(stream_);
      return r;
    }
    if (api_ == "vmm") {
      CUmemAllocationProp prop = vmm_prop();
      if (CUresult r = cuMemCreate(&a.handle, step, &prop, 0); r != CUDA_SUCCESS) return r;
      if (CUresult r = cuMemAddressReserve(&a.ptr, step, 0, 0, 0); r != CUDA_SUCCESS) return r;
      if (CUresult r = cuMemMap(a.ptr, step, 0, a.handle, 0); r != CUDA_SUCCESS) return r;
      CUmemAccessDesc access{};
      access.location = prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      return cuMemSetAccess(a.ptr, step, &access, 1);
    }
    if (api_ == "array") {
      // 2D float4 array: 16 bytes per texel, 4096 texels per row.
      CUDA_ARRAY3D_DESCRIPTOR desc{};
      desc.Width = 4096;
      desc.Height = std::max<size_t>(step / (4096 * 16), 1);
      desc.Format = CU_AD_FORMAT_FLOAT;
      desc.NumChannels = 4;
      a.size = desc.Width * desc.Height * 16;
      return cuArray3DCreate(&a.array, &desc);
    }
    return CUDA_ERROR_INVALID_VALUE;
  }

  void release(Allocation& a) {
    if (api_ == "alloc" || api_ == "pitch" || api_ == "managed") {
      cuMemFree(a.ptr);
    } else if (api_ == "async" || api_ == "pool") {
      cuMemFreeAsync(a.ptr, stream_);
      cuStreamSynchronize(stream_);
    } else if (api_ == "vmm") {
      if (a.ptr) {
        cuMemUnmap(a.ptr, a.size);
        cuMemAddressFree(a.ptr, a.size);
      }
      if (a.handle) cuMemRelease(a.handle);
    } else if (api_ == "array") {
      cuArrayDestroy(a.array);
    }
  }

  void finish() {
    if (pool_) cuMemPoolDestroy(pool_);
    if (stream_) cuStreamDestroy(stream_);
  }

 private:
  CUmemAllocationProp vmm_prop() const {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev_;
    return prop;
  }

  std::string api_;
  CUdevice dev_;
  CUstream stream_ = nullptr;
  CUmemoryPool pool_ = nullptr;
  size_t granularity_ = 1;
};

}  // namespace

// An exception (a bad argument CLI11 lets through, a JSON error) ends the
// program with a message and exit status 2, not an abort.
int main(int argc, char** argv) try {
  std::string step_text = "256Mi", max_text, api = "alloc";
  int device = 0;
  double hold_seconds = 0;
  std::string ready_file, go_file;
  CLI::App app{"Allocate device memory in steps until out of memory; print one JSON line"};
  app.add_option("--step", step_text,
                 "bytes per allocation (Kubernetes quantity: 256Mi, 1Gi, ...)");
  app.add_option("--max", max_text, "stop after this many bytes (default: until out of memory)");
  app.add_option("--api", api, "allocation API")
      ->check(CLI::IsMember({"alloc", "pitch", "managed", "async", "pool", "vmm", "array"}));
  app.add_option("--device", device, "device ordinal")->check(CLI::NonNegativeNumber);
  app.add_option("--hold-seconds", hold_seconds,
                 "keep the memory this long after printing (then free it)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ready-file", ready_file,
                 "create this file once the context exists (start barrier)");
  app.add_option("--go-file", go_file, "then wait until this file exists before allocating");
  CLI11_PARSE(app, argc, argv);
  const auto step = samples::parse_bytes(step_text);
  const auto limit = max_text.empty() ? std::optional<uint64_t>() : samples::parse_bytes(max_text);
  if (!step || *step == 0 || (!max_text.empty() && !limit)) {
    std::fprintf(stderr, "alloc_probe: --step/--max need a byte quantity such as 256Mi\n");
    return 2;
  }

  samples::check(cuInit(0), "cuInit");
  CUdevice dev;
  samples::check(cuDeviceGet(&dev, device), "cuDeviceGet");
  CUcontext ctx;
  samples::check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  samples::check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");

  // Barrier: lets several probes create their contexts before any allocates.
  if (!ready_file.empty()) std::fclose(std::fopen(ready_file.c_str(), "w"));
  while (!go_file.empty() && access(go_file.c_str(), F_OK) != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  Allocator allocator(api, dev);
  const View before = view(dev);
  CUresult last = allocator.setup();
  std::vector<Allocation> held;
  uint64_t obtained = 0;
  const size_t unit = allocator.round(*step);
  while (last == CUDA_SUCCESS && (!limit || obtained + unit <= *limit)) {
    Allocation a;
    last = allocator.allocate(unit, a);
    if (last != CUDA_SUCCESS) {
      allocator.release(a);  // undo partial VMM steps
      break;
    }
    obtained += a.size;
    held.push_back(a);
  }
  const View after = view(dev);

  nlohmann::json out{{"pid", getpid()},
                     {"api", api},
                     {"step", unit},
                     {"allocations", held.size()},
                     {"bytes", obtained},
                     {"result", samples::error_name(last)},
                     {"before", to_json(before)},
                     {"after", to_json(after)}};
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  if (hold_seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(hold_seconds));
  for (auto& a : held) allocator.release(a);
  allocator.finish();
  cuDevicePrimaryCtxRelease(dev);
  const bool ok = last == CUDA_SUCCESS || last == CUDA_ERROR_OUT_OF_MEMORY;
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "alloc_probe: %s\n", e.what());
  return 2;
}
