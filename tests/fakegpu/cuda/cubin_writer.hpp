#pragma once
// Writes a 64-bit ELF cubin laid out as nvcc and the JIT linker lay one out:
// named sections, a symbol table (kernels marked STO_CUDA_ENTRY), the
// .nv.info records of each kernel's registers, frame size and block bound, a
// .nv.shared.<kernel> section for static shared memory and the globals in
// .nv.global. What cuLinkComplete hands back; kernel_resources() and
// image_globals() read it as they read nvcc's cubins.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tests/fakegpu/cuda/kernel_resources.hpp"

namespace fakegpu {

struct CubinFunction {
  std::string name = "kernel";
  KernelResources resources;
  bool entry = true;  // a kernel; false: a device function
};

struct CubinContents {
  int sm = 90;
  std::vector<CubinFunction> functions = {CubinFunction{}};
  std::vector<std::pair<std::string, uint64_t>> globals;  // name, bytes
  std::vector<std::string> undefined_functions;           // references left to a later link
};

std::string write_cubin(const CubinContents& contents);

}  // namespace fakegpu
