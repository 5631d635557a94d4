#include "tests/fakegpu/cuda/module_memory.hpp"

#include <algorithm>

#include "tests/fakegpu/cuda/size_math.hpp"

namespace fakegpu {

namespace {

constexpr uint64_t kGranule = 2ull << 20;

void unmap_global(uint64_t address) {
  Driver& d = driver();
  auto it = d.regions.find(address);
  if (it == d.regions.end()) return;
  if (it->second.backing) release_backing(*it->second.backing);
  va_release(address, it->second.size);
  d.regions.erase(it);
}

// Gives each global of `m` device addresses (caller holds driver().mu); false,
// changing nothing, when the address space is exhausted.
bool map_globals(Module* m, int device) {
  for (const auto& [name, size] : m->global_sizes) {
    const uint64_t span = std::max<uint64_t>(size, 1);
    const uint64_t base = va_alloc(span, 256);
    if (base == 0) {
      for (const auto& [_, global] : m->globals) unmap_global(global.address);
      m->globals.clear();
      return false;
    }
    Region r;
    r.size = span;
    r.kind = RegionKind::global;
    r.device = device;  // charged with the module, not on its own
    r.backing = std::make_shared<Backing>();
    r.backing->size = span;
    driver().regions[base] = std::move(r);
    m->globals[name] = ModuleGlobal{base, size};
  }
  return true;
}

}  // namespace

bool module_footprint(const Module& m, uint64_t* bytes) {
  uint64_t total = m.image.size();
  for (const auto& [name, size] : m.global_sizes) {
    if (!add_size(total, size, &total)) return false;
  }
  return total <= kMaxAllocationBytes && round_up(std::max<uint64_t>(total, 1), kGranule, bytes);
}

CUresult place_module(Module* m, int device) {
  uint64_t bytes = 0;
  if (!module_footprint(*m, &bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = charge_device(device, bytes); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    if (map_globals(m, device)) {
      m->device = device;
      m->charged = bytes;
      return CUDA_SUCCESS;
    }
  }
  uncharge_device(device, bytes);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult place_library(const void* handle, int device) {
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> guard(driver().mu);
    const Module* m = handle_object<Module>(handle, HandleKind::library);
    if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (m->device >= 0) return CUDA_SUCCESS;
    if (!module_footprint(*m, &bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (CUresult r = charge_device(device, bytes); r != CUDA_SUCCESS) return r;
  CUresult result = CUDA_ERROR_OUT_OF_MEMORY;
  {
    // Unloaded or placed by another thread meanwhile: give the charge back.
    std::lock_guard<std::mutex> guard(driver().mu);
    Module* m = handle_object<Module>(handle, HandleKind::library);
    if (m == nullptr) {
      result = CUDA_ERROR_INVALID_HANDLE;
    } else if (m->device >= 0) {
      result = CUDA_SUCCESS;
    } else if (map_globals(m, device)) {
      m->device = device;
      m->charged = bytes;
      return CUDA_SUCCESS;
    }
  }
  uncharge_device(device, bytes);
  return result;
}

uint64_t unplace_module(Module* m, int* device) {
  for (const auto& [_, global] : m->globals) unmap_global(global.address);
  m->globals.clear();
  *device = m->device;
  const uint64_t bytes = m->charged;
  m->device = -1;
  m->charged = 0;
  return bytes;
}

}  // namespace fakegpu
