// What a module image may take from the device once loaded, read from the
// image itself before the driver sees it, so that the quota is reserved
// before the memory exists. The driver copies the image's code and globals
// into device memory; the bound is the image's extent (what its container
// header says: a fatbin's sizes, an ELF cubin's section header table end, a
// PTX text's NUL) plus every section an ELF cubin allocates on the device
// (code, initialised and zero-filled globals, constant banks), in 2 MiB
// granules, at least one. Zero-filled globals occupy no bytes of the image, so
// without the section walk a cubin declaring a 1 GiB __device__ array would
// be bounded by a few kilobytes. Not bounded: the globals a PTX text or a
// fatbin's entries declare, and JIT output larger than its PTX; the
// measurement after the load catches those (module_accounting.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cushare::shim {

inline constexpr std::uint64_t kModuleGranule = 2ull << 20;
// A bound no quota can hold: an image whose sizes do not fit in 64 bits.
inline constexpr std::uint64_t kUnboundedModule = ~std::uint64_t{0};

// The bound of an image in memory (cuModuleLoadData, cuLibraryLoadData, ...).
// Reads only what the driver reads to find the image's size. Null: one
// granule (the driver refuses it).
std::uint64_t module_image_bound(const void* image) noexcept;

// The bound of an image file (cuModuleLoad, cuLibraryLoadFromFile): the
// same, read from the file; one granule when it cannot be read (the driver
// then fails the load).
std::uint64_t module_file_bound(const char* path) noexcept;

}  // namespace cushare::shim
