// module_probe: device memory of loaded modules and libraries under the
// shim's quota (linked with -lcuda, run with the shim preloaded; the test
// samples fakegpu's ground truth while it runs). Prints one JSON line.
// Modes:
//   fill     load PTX images of --bytes (declaring --global-bytes of
//            globals) through --api (module, module_file, library,
//            library_file) until refused, noting what each load took from
//            the virtual free memory; hold the peak; unload all
//   context  modules loaded in a created context and in the primary
//            context: their charges return when the context is destroyed
//            (cuCtxDestroy) or deactivated (cuDevicePrimaryCtxRelease)
//   lazy     a library loaded while no context is current: charged at the
//            load, nothing more when its first kernel places it
#include <cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
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
  std::string api = "module";
  std::uint64_t bytes = 48ull << 20;
  std::uint64_t global_bytes = 0;
  unsigned count = 4;
  unsigned max_loads = 256;
  unsigned hold_ms = 300;
};

// A PTX text of exactly `bytes` characters (one kernel, a __device__ array
// of `global_bytes` if not 0, then comments).
std::string ptx_of_size(std::uint64_t bytes, std::uint64_t global_bytes = 0) {
  std::string text =
      ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry probe_kernel()\n{\n"
      "ret;\n}\n";
  if (global_bytes)
    text += ".visible .global .align 8 .b8 probe_global[" + std::to_string(global_bytes) + "];\n";
  if (bytes < text.size() + 3) fail("--bytes too small for a PTX text");
  const std::uint64_t pad = bytes - text.size();
  std::string comment = "//";
  comment.append(pad - 3, 'x');
  comment += '\n';
  return text + comment;
}

// One loaded image, through the API under test.
struct Loaded {
  CUmodule module = nullptr;
  CUlibrary library = nullptr;
};

CUresult load(const std::string& api, const std::string& image, const std::string& file,
              Loaded& out) {
  if (api == "module") return cuModuleLoadData(&out.module, image.c_str());
  if (api == "module_file") return cuModuleLoad(&out.module, file.c_str());
  if (api == "library")
    return cuLibraryLoadData(&out.library, image.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  return cuLibraryLoadFromFile(&out.library, file.c_str(), nullptr, nullptr, 0, nullptr, nullptr,
                               0);
}

void unload(const Loaded& l) {
  if (l.module) expect(cuModuleUnload(l.module), "cuModuleUnload");
  if (l.library) expect(cuLibraryUnload(l.library), "cuLibraryUnload");
}

std::string write_image(const std::string& image) {
  std::string path = "module_probe_" + std::to_string(getpid()) + ".ptx";
  std::ofstream(path, std::ios::binary) << image;
  return path;
}

int mode_fill(const Options& o) {
  start();
  const std::string image = ptx_of_size(o.bytes, o.global_bytes);
  const std::string file = o.api.ends_with("_file") ? write_image(image) : "";
  const std::uint64_t free_before = free_view();
  std::vector<Loaded> loaded;
  std::vector<std::uint64_t> took;
  CUresult result = CUDA_SUCCESS;
  while (loaded.size() < o.max_loads) {
    const std::uint64_t before = free_view();
    Loaded l;
    result = load(o.api, image, file, l);
    if (result != CUDA_SUCCESS) break;
    loaded.push_back(l);
    took.push_back(before - free_view());
  }
  const std::uint64_t free_full = free_view();
  std::this_thread::sleep_for(std::chrono::milliseconds(o.hold_ms));
  for (const Loaded& l : loaded) unload(l);
  const std::uint64_t free_after = free_view();
  if (!file.empty()) std::remove(file.c_str());
  json out = {{"result", name_of(result)},  {"loads", loaded.size()}, {"took", took},
              {"free_before", free_before}, {"free_full", free_full}, {"free_after", free_after}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

std::vector<CUmodule> load_modules(const std::string& image, unsigned count) {
  std::vector<CUmodule> mods(count);
  for (auto& m : mods) expect(cuModuleLoadData(&m, image.c_str()), "cuModuleLoadData");
  return mods;
}

int mode_context(const Options& o) {
  const CUdevice dev = start();
  const std::string image = ptx_of_size(o.bytes);
  const std::uint64_t free0 = free_view();
  CUcontext created = nullptr;
  expect(cuCtxCreate(&created, nullptr, 0, dev), "cuCtxCreate");
  const std::uint64_t free_created = free_view();
  load_modules(image, o.count);
  const std::uint64_t free_created_loaded = free_view();
  expect(cuCtxDestroy(created), "cuCtxDestroy");  // the primary is current again
  const std::uint64_t free_destroyed = free_view();
  load_modules(image, o.count);
  const std::uint64_t free_primary_loaded = free_view();
  // Deactivate the primary context from another one: its modules go with it.
  CUcontext other = nullptr;
  expect(cuCtxCreate(&other, nullptr, 0, dev), "cuCtxCreate");
  const std::uint64_t free_other = free_view();
  expect(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
  const std::uint64_t free_released = free_view();
  json out = {{"free0", free0},
              {"free_created", free_created},
              {"free_created_loaded", free_created_loaded},
              {"free_destroyed", free_destroyed},
              {"free_primary_loaded", free_primary_loaded},
              {"free_other", free_other},
              {"free_released", free_released}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int mode_lazy(const Options& o) {
  expect(cuInit(0), "cuInit");
  const std::string image = ptx_of_size(o.bytes);
  CUlibrary lib = nullptr;
  expect(cuLibraryLoadData(&lib, image.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0),
         "cuLibraryLoadData without a context");
  start();
  const std::uint64_t free_loaded = free_view();
  CUkernel kernel = nullptr;
  expect(cuLibraryGetKernel(&kernel, lib, "probe_kernel"), "cuLibraryGetKernel");
  const std::uint64_t free_placed = free_view();
  expect(cuLibraryUnload(lib), "cuLibraryUnload");
  const std::uint64_t free_unloaded = free_view();
  json out = {
      {"free_loaded", free_loaded}, {"free_placed", free_placed}, {"free_unloaded", free_unloaded}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

// An exception (a bad argument CLI11 lets through, a JSON error) fails the
// probe with its message, like any other failure, not with an abort.
int main(int argc, char** argv) try {
  std::string mode;
  Options o;
  CLI::App app{"Device memory of modules and libraries under a quota"};
  app.add_option("--mode", mode)->required()->check(CLI::IsMember({"fill", "context", "lazy"}));
  app.add_option("--api", o.api)
      ->check(CLI::IsMember({"module", "module_file", "library", "library_file"}));
  app.add_option("--bytes", o.bytes, "bytes of each PTX image");
  app.add_option("--global-bytes", o.global_bytes, "fill: a __device__ array in each image");
  app.add_option("--count", o.count, "context: modules loaded in each context");
  app.add_option("--max-loads", o.max_loads, "fill: most loads");
  app.add_option("--hold-ms", o.hold_ms, "fill: how long the peak is held for the sampler");
  CLI11_PARSE(app, argc, argv);
  if (mode == "fill") return mode_fill(o);
  if (mode == "context") return mode_context(o);
  return mode_lazy(o);
} catch (const std::exception& e) {
  fail(e.what());
}
