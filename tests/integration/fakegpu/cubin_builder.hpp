#pragma once
// Module images for the API tests: cubins written as fakegpu's linker writes
// them (laid out as nvcc lays them out; the realprog tests load nvcc's own),
// and a fatbin around one.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/fakegpu/cuda/cubin_writer.hpp"

namespace fakegpu_test {

struct CubinKernel {
  std::string name = "kernel";
  uint32_t regs = 32;
  uint32_t frame = 0;        // EIATTR_FRAME_SIZE
  uint32_t max_threads = 0;  // 0: no EIATTR_MAX_THREADS record
  uint64_t shared = 0;       // 0: no .nv.shared.<name> section
};

struct CubinSpec {
  int sm = 90;
  std::vector<CubinKernel> kernels = {CubinKernel{}};
  std::vector<std::pair<std::string, uint64_t>> objects;  // __device__ variables and their sizes
};

inline std::string cubin(const CubinSpec& spec) {
  fakegpu::CubinContents c;
  c.sm = spec.sm;
  c.functions.clear();
  for (const CubinKernel& k : spec.kernels) {
    fakegpu::KernelResources r;
    r.regs = static_cast<int>(k.regs);
    r.local_bytes = k.frame;
    r.max_threads = static_cast<int>(k.max_threads);
    r.static_smem = k.shared;
    c.functions.push_back({k.name, r, true});
  }
  c.globals = spec.objects;
  return fakegpu::write_cubin(c);
}

// A fatbin holding one entry (kind 1 PTX, 2 ELF), compressed (flag 0x2000) or not.
inline std::string fatbin(const std::string& payload, bool compressed, uint16_t kind = 2) {
  std::string entry(64, '\0');
  const uint32_t header = 64;
  const uint64_t size = payload.size(), flags = compressed ? 0x2000 : 0;
  std::memcpy(entry.data(), &kind, 2);
  std::memcpy(entry.data() + 4, &header, 4);
  std::memcpy(entry.data() + 8, &size, 8);
  std::memcpy(entry.data() + 40, &flags, 8);
  std::string out(16, '\0');
  const uint32_t magic = 0xBA55ED50;
  const uint16_t version = 1, header_size = 16;
  const uint64_t body = entry.size() + payload.size();
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &version, 2);
  std::memcpy(out.data() + 6, &header_size, 2);
  std::memcpy(out.data() + 8, &body, 8);
  return out + entry + payload;
}

}  // namespace fakegpu_test
