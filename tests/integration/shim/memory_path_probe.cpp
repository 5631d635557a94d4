// memory_path_probe: attacks on the quota through paths where the driver
// keeps memory after the call that looks like its end (linked with -lcuda,
// run with the shim preloaded). Prints one JSON line of results; the test
// samples fakegpu's ground truth while it runs, and each fill holds its peak
// for --hold-ms so the sampler sees it. Modes:
//   pools         create --count pools (release threshold: keep everything),
//                 allocate from the default pool once the pool table may be
//                 full, then fill --bytes into each pool (last created first),
//                 freeing each allocation (the pool keeps the memory)
//   pool_destroy  allocate --bytes from a pool and destroy it while the
//                 allocation lives (the driver keeps the pool), then fill
//                 with cuMemAlloc_v2
//   vmm           cuMemCreate --bytes handles, each mapped as --pieces
//                 adjacent mappings (and once more elsewhere with --twice),
//                 released while mapped, until refused; then a retained
//                 handle; then unmapped (one cuMemUnmap per handle range)
//   graph_legacy  a graph allocating --bytes, instantiated through the
//                 legacy cuGraphInstantiate ABIs (cudaVersion 10000, 11000)
//                 and launched --launches times while --hold bytes are held
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "probe_driver.hpp"

namespace {

using json = nlohmann::json;
using probe::expect;
using probe::fail;
using probe::free_view;
using probe::name_of;
using probe::start;

struct Options {
  unsigned count = 300;
  std::uint64_t bytes = 64ull << 20;
  std::uint64_t hold = 512ull << 20;
  unsigned pieces = 1;
  bool twice = false;
  unsigned launches = 10;
  unsigned max_steps = 64;
  unsigned hold_ms = 300;
};

void hold(const Options& o) {
  std::this_thread::sleep_for(std::chrono::milliseconds(o.hold_ms));
}

json counts(const std::vector<CUresult>& results) {
  json out = json::object();
  for (CUresult r : results) out[name_of(r)] = out.value(name_of(r), 0) + 1;
  return out;
}

int mode_pools(const Options& o) {
  const CUdevice dev = start();
  CUstream s = nullptr;
  expect(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  std::vector<CUmemoryPool> pools;
  std::vector<CUresult> created;
  for (unsigned i = 0; i < o.count; ++i) {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool p = nullptr;
    const CUresult r = cuMemPoolCreate(&p, &props);
    created.push_back(r);
    if (r != CUDA_SUCCESS) continue;
    cuuint64_t keep = ~0ull;  // a pool that never gives memory back
    expect(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep),
           "cuMemPoolSetAttribute");
    pools.push_back(p);
  }
  // The default pool, first used now: the table may have no room for it.
  CUdeviceptr d = 0;
  const CUresult from_default = cuMemAllocAsync(&d, o.bytes, s);
  if (from_default == CUDA_SUCCESS) {
    expect(cuMemFreeAsync(d, s), "cuMemFreeAsync (default pool)");
    expect(cuStreamSynchronize(s), "cuStreamSynchronize");
  }
  // The pools created last first: those are the ones a table would miss.
  std::vector<CUresult> filled;
  for (auto it = pools.rbegin(); it != pools.rend(); ++it) {
    CUdeviceptr p = 0;
    const CUresult r = cuMemAllocFromPoolAsync(&p, o.bytes, *it, s);
    filled.push_back(r);
    if (r != CUDA_SUCCESS) continue;
    expect(cuMemFreeAsync(p, s), "cuMemFreeAsync");
    expect(cuStreamSynchronize(s), "cuStreamSynchronize");
  }
  const std::uint64_t free_full = free_view();
  hold(o);
  for (CUmemoryPool p : pools) expect(cuMemPoolDestroy(p), "cuMemPoolDestroy");
  const std::uint64_t free_after_destroy = free_view();
  // With the pools gone the table has room again: the default pool works.
  const CUresult default_after = cuMemAllocAsync(&d, o.bytes, s);
  if (default_after == CUDA_SUCCESS) expect(cuMemFreeAsync(d, s), "cuMemFreeAsync");
  expect(cuStreamSynchronize(s), "cuStreamSynchronize");
  std::printf("%s\n", json{{"pools", pools.size()},
                           {"create", counts(created)},
                           {"default_pool", name_of(from_default)},
                           {"fill", counts(filled)},
                           {"free_full", free_full},
                           {"free_after_destroy", free_after_destroy},
                           {"default_pool_after_destroy", name_of(default_after)}}
                          .dump()
                          .c_str());
  return 0;
}

int mode_pool_destroy(const Options& o) {
  const CUdevice dev = start();
  CUstream s = nullptr;
  expect(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const std::uint64_t free_before = free_view();
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  CUmemoryPool pool = nullptr;
  expect(cuMemPoolCreate(&pool, &props), "cuMemPoolCreate");
  CUdeviceptr live = 0;
  expect(cuMemAllocFromPoolAsync(&live, o.bytes, pool, s), "cuMemAllocFromPoolAsync");
  expect(cuStreamSynchronize(s), "cuStreamSynchronize");
  expect(cuMemPoolDestroy(pool), "cuMemPoolDestroy");  // returns at once; the pool lives on
  const std::uint64_t free_destroyed = free_view();
  std::vector<CUdeviceptr> held;
  CUresult last = CUDA_SUCCESS;
  for (unsigned i = 0; i < o.max_steps; ++i) {
    CUdeviceptr p = 0;
    last = cuMemAlloc(&p, o.bytes);
    if (last != CUDA_SUCCESS) break;
    held.push_back(p);
  }
  hold(o);
  for (CUdeviceptr p : held) expect(cuMemFree(p), "cuMemFree_v2");
  expect(cuMemFreeAsync(live, s), "cuMemFreeAsync (last allocation of the destroyed pool)");
  expect(cuStreamSynchronize(s), "cuStreamSynchronize");
  std::printf("%s\n", json{{"free_before", free_before},
                           {"free_destroyed", free_destroyed},
                           {"allocated_after_destroy", held.size()},
                           {"result", name_of(last)},
                           {"free_after", free_view()}}
                          .dump()
                          .c_str());
  return 0;
}

struct Vmm {
  CUmemAllocationProp prop{};
  std::uint64_t granularity = 0;

  explicit Vmm(CUdevice dev) {
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t g = 0;
    expect(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           "cuMemGetAllocationGranularity");
    granularity = g;
  }

  // [ptr, ptr + size) mapped to `h` as `pieces` adjacent mappings.
  void map(CUdeviceptr ptr, std::uint64_t size, CUmemGenericAllocationHandle h,
           unsigned pieces) const {
    const std::uint64_t piece = size / pieces;
    for (unsigned i = 0; i < pieces; ++i)
      expect(cuMemMap(ptr + i * piece, piece, i * piece, h, 0), "cuMemMap");
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    expect(cuMemSetAccess(ptr, size, &access, 1), "cuMemSetAccess");
  }
};

struct Range {
  CUdeviceptr ptr = 0;
  std::uint64_t size = 0;
};

int mode_vmm(const Options& o) {
  const CUdevice dev = start();
  const Vmm vmm(dev);
  if (o.bytes % (vmm.granularity * o.pieces)) fail("--bytes must split into granular pieces");
  const std::uint64_t free_before = free_view();
  // Released while mapped, until the quota refuses.
  std::vector<Range> mapped, reserved;
  CUresult last = CUDA_SUCCESS;
  unsigned handles = 0;
  for (; handles < o.max_steps; ++handles) {
    CUmemGenericAllocationHandle h = 0;
    last = cuMemCreate(&h, o.bytes, &vmm.prop, 0);
    if (last != CUDA_SUCCESS) break;
    const std::uint64_t span = o.twice ? 2 * o.bytes : o.bytes;
    CUdeviceptr va = 0;
    expect(cuMemAddressReserve(&va, span, 0, 0, 0), "cuMemAddressReserve");
    reserved.push_back({va, span});
    vmm.map(va, o.bytes, h, o.pieces);
    mapped.push_back({va, o.bytes});
    if (o.twice) {
      vmm.map(va + o.bytes, o.bytes, h, 1);
      mapped.push_back({va + o.bytes, o.bytes});
    }
    expect(cuMemRelease(h), "cuMemRelease (still mapped)");
  }
  const std::uint64_t free_full = free_view();
  hold(o);
  // Unmapping all but the last mapping of each handle keeps it charged.
  std::uint64_t free_partly_unmapped = free_full;
  if (o.twice) {
    for (std::size_t i = 0; i < mapped.size(); i += 2)
      expect(cuMemUnmap(mapped[i].ptr, mapped[i].size), "cuMemUnmap (first of two)");
    free_partly_unmapped = free_view();
    for (std::size_t i = 1; i < mapped.size(); i += 2)
      expect(cuMemUnmap(mapped[i].ptr, mapped[i].size), "cuMemUnmap (second of two)");
  } else {
    // One call per handle covers its `pieces` adjacent mappings.
    for (const Range& m : mapped) expect(cuMemUnmap(m.ptr, m.size), "cuMemUnmap");
  }
  const std::uint64_t free_unmapped = free_view();

  // A retained handle is one more reference: released once, unmapped, the
  // memory stays until the second release.
  CUmemGenericAllocationHandle h = 0;
  expect(cuMemCreate(&h, o.bytes, &vmm.prop, 0), "cuMemCreate (retained)");
  CUdeviceptr va = 0;
  expect(cuMemAddressReserve(&va, o.bytes, 0, 0, 0), "cuMemAddressReserve");
  reserved.push_back({va, o.bytes});
  vmm.map(va, o.bytes, h, 1);
  CUmemGenericAllocationHandle again = 0;
  expect(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + vmm.granularity)),
         "cuMemRetainAllocationHandle");
  expect(cuMemRelease(h), "cuMemRelease (first reference)");
  expect(cuMemUnmap(va, o.bytes), "cuMemUnmap (retained)");
  const std::uint64_t free_retained = free_view();
  expect(cuMemRelease(again), "cuMemRelease (retained reference)");
  const std::uint64_t free_end = free_view();
  for (const Range& r : reserved) expect(cuMemAddressFree(r.ptr, r.size), "cuMemAddressFree");
  std::printf("%s\n", json{{"handles", handles},
                           {"result", name_of(last)},
                           {"free_before", free_before},
                           {"free_full", free_full},
                           {"free_partly_unmapped", free_partly_unmapped},
                           {"free_unmapped", free_unmapped},
                           {"same_handle_retained", again == h},
                           {"free_retained", free_retained},
                           {"free_end", free_end}}
                          .dump()
                          .c_str());
  return 0;
}

using LegacyInstantiate = CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);

int mode_graph_legacy(const Options& o) {
  start();
  CUstream s = nullptr;
  expect(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  // A graph whose allocation outlives the launch: the program frees it.
  CUdeviceptr inside = 0;
  expect(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture_v2");
  expect(cuMemAllocAsync(&inside, o.bytes, s), "captured cuMemAllocAsync");
  CUgraph graph = nullptr;
  expect(cuStreamEndCapture(s, &graph), "cuStreamEndCapture");
  json out = json::object();
  for (int version : {10000, 11000}) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    expect(cuGetProcAddress("cuGraphInstantiate", &fn, version, 0, &status),
           "cuGetProcAddress(cuGraphInstantiate)");
    if (!fn || status != CU_GET_PROC_ADDRESS_SUCCESS) fail("no legacy cuGraphInstantiate");
    CUgraphExec exec = nullptr;
    CUgraphNode error_node = nullptr;
    char log[256] = "";
    expect(reinterpret_cast<LegacyInstantiate>(fn)(&exec, graph, &error_node, log, sizeof log),
           "legacy cuGraphInstantiate");
    CUdeviceptr held = 0;
    expect(cuMemAlloc(&held, o.hold), "cuMemAlloc_v2 (held)");
    std::vector<CUresult> refused;
    for (unsigned i = 0; i < o.launches; ++i) {
      const CUresult r = cuGraphLaunch(exec, s);
      refused.push_back(r);
      expect(cuStreamSynchronize(s), "cuStreamSynchronize");
      if (r == CUDA_SUCCESS) {
        std::this_thread::sleep_for(std::chrono::milliseconds(o.hold_ms / 4));
        expect(cuMemFreeAsync(inside, s), "cuMemFreeAsync (graph allocation)");
        expect(cuStreamSynchronize(s), "cuStreamSynchronize");
      }
    }
    expect(cuMemFree(held), "cuMemFree_v2 (held)");
    const CUresult fits = cuGraphLaunch(exec, s);
    expect(cuStreamSynchronize(s), "cuStreamSynchronize");
    hold(o);
    if (fits == CUDA_SUCCESS) {
      expect(cuMemFreeAsync(inside, s), "cuMemFreeAsync (graph allocation)");
      expect(cuStreamSynchronize(s), "cuStreamSynchronize");
    }
    expect(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
    expect(cuDeviceGraphMemTrim(0), "cuDeviceGraphMemTrim");
    out[std::to_string(version)] = {{"over_quota", counts(refused)}, {"fits", name_of(fits)}};
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

// An exception (a bad argument CLI11 lets through, a JSON error) fails the
// probe with its message, like any other failure, not with an abort.
int main(int argc, char** argv) try {
  std::string mode;
  Options o;
  CLI::App app{"Quota attacks through memory the driver keeps"};
  app.add_option("--mode", mode)
      ->required()
      ->check(CLI::IsMember({"pools", "pool_destroy", "vmm", "graph_legacy"}));
  app.add_option("--count", o.count, "pools: how many to create");
  app.add_option("--bytes", o.bytes, "bytes per allocation / handle / graph allocation");
  app.add_option("--hold", o.hold, "graph_legacy: bytes held while launching");
  app.add_option("--pieces", o.pieces, "vmm: adjacent mappings per handle");
  app.add_flag("--twice", o.twice, "vmm: map each handle a second time elsewhere");
  app.add_option("--launches", o.launches, "graph_legacy: launches over the quota");
  app.add_option("--max-steps", o.max_steps, "most allocations in a fill");
  app.add_option("--hold-ms", o.hold_ms, "how long each peak is held for the sampler");
  CLI11_PARSE(app, argc, argv);
  if (o.pieces == 0) o.pieces = 1;
  if (mode == "pools") return mode_pools(o);
  if (mode == "pool_destroy") return mode_pool_destroy(o);
  if (mode == "vmm") return mode_vmm(o);
  return mode_graph_legacy(o);
} catch (const std::exception& e) {
  fail(e.what());
}
