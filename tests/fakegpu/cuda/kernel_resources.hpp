#pragma once
// What a kernel takes from a multiprocessor, as recorded in its module image:
// registers per thread, static shared memory, local memory, its own bound on
// the block size, and the architectures it was built for. Occupancy, the
// function attributes and the launch checks are computed from these.
#include <cstdint>
#include <string_view>

namespace fakegpu {

// What a kernel compiled by the JIT is taken to use, since fakegpu compiles
// nothing: ptxas's register count is unknowable without ptxas.
inline constexpr int kDefaultRegisters = 32;

struct KernelResources {
  int regs = kDefaultRegisters;
  uint64_t static_smem = 0;
  uint64_t local_bytes = 0;
  int max_threads = 0;     // launch bounds / .maxntid / .reqntid; 0: none
  int ptx_version = 0;     // virtual architecture (80 for compute_80); 0: the device's
  int binary_version = 0;  // SM of the cubin; 0: JIT-compiled for the device
};

// The resources of kernel `name` in a module image (PTX text, ELF cubin or
// fatbin). In a cubin: the register count and frame size of `.nv.info`, the
// bounds of `.nv.info.<name>` and the size of `.nv.shared.<name>`; in PTX: the
// `.maxnreg`, `.maxntid`/`.reqntid` directives and the `.shared`/`.local`
// variables of the entry; in a fatbin, the first uncompressed cubin that
// defines the kernel, else its first uncompressed PTX that does.
KernelResources kernel_resources(std::string_view image, bool ptx, std::string_view name);

}  // namespace fakegpu
