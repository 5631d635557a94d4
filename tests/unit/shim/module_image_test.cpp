// The bound a module image is reserved before the driver loads it.
#include "shim/accounting/module_image.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace cushare::shim {
namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

template <class T>
void put(std::vector<unsigned char>& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

// An ELF64 image of `extent` bytes whose section header table (at the end)
// has a zero-filled global section of `nobits` and an allocated data
// section of `data` bytes.
std::vector<unsigned char> elf(std::uint64_t extent, std::uint64_t nobits, std::uint64_t data) {
  constexpr std::uint16_t kEntry = 0x40, kCount = 3;
  std::vector<unsigned char> b(extent, 0);
  b[0] = 0x7f, b[1] = 'E', b[2] = 'L', b[3] = 'F';
  const std::uint64_t shoff = extent - kEntry * kCount;
  put(b, 0x28, shoff);
  put(b, 0x3A, kEntry);
  put(b, 0x3C, kCount);
  // Section 0 is the null section; 1: .nv.global (NOBITS); 2: data (ALLOC).
  put(b, shoff + kEntry + 0x04, std::uint32_t{8});
  put(b, shoff + kEntry + 0x20, nobits);
  put(b, shoff + 2 * kEntry + 0x04, std::uint32_t{1});
  put(b, shoff + 2 * kEntry + 0x08, std::uint64_t{2});
  put(b, shoff + 2 * kEntry + 0x20, data);
  return b;
}

TEST(ModuleImage, PtxIsItsTextInGranules) {
  const std::string small = ".version 8.0\n.visible .entry k() { ret; }\n";
  EXPECT_EQ(module_image_bound(small.c_str()), kModuleGranule);
  const std::string exact(6 * kMiB, 'x');
  EXPECT_EQ(module_image_bound(exact.c_str()), 6 * kMiB);
  const std::string over(6 * kMiB + 1, 'x');
  EXPECT_EQ(module_image_bound(over.c_str()), 8 * kMiB);
  EXPECT_EQ(module_image_bound(nullptr), kModuleGranule);
}

TEST(ModuleImage, FatbinIsItsHeaderSizes) {
  std::vector<unsigned char> b(64, 0);
  put(b, 0, std::uint32_t{0xBA55ED50});
  put(b, 6, std::uint16_t{16});
  put(b, 8, std::uint64_t{5 * kMiB});
  EXPECT_EQ(module_image_bound(b.data()), 6 * kMiB);
  // The wrapper the CUDA runtime registers points at the fatbin.
  std::vector<unsigned char> w(24, 0);
  put(w, 0, std::uint32_t{0x466243b1});
  put(w, 8, static_cast<const void*>(b.data()));
  EXPECT_EQ(module_image_bound(w.data()), 6 * kMiB);
  // Sizes that do not fit in 64 bits are no image a quota holds.
  put(b, 8, ~std::uint64_t{0});
  EXPECT_EQ(module_image_bound(b.data()), kUnboundedModule);
}

TEST(ModuleImage, ElfAddsWhatItAllocatesOnTheDevice) {
  // Zero-filled globals take no bytes in the image but memory on the device.
  const auto b = elf(4096, 1ull << 30, 1000);
  EXPECT_EQ(module_image_bound(b.data()), (1ull << 30) + 2 * kMiB);
  const auto plain = elf(4096, 0, 0);
  EXPECT_EQ(module_image_bound(plain.data()), kModuleGranule);
  const auto wraps = elf(4096, ~std::uint64_t{0} - 100, 0);
  EXPECT_EQ(module_image_bound(wraps.data()), kUnboundedModule);
}

TEST(ModuleImage, FilesAreReadTheSameWay) {
  const auto b = elf(4096, 64 * kMiB, 0);
  char path[] = "/tmp/module_image_testXXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  FILE* f = fdopen(fd, "wb");
  std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
  EXPECT_EQ(module_file_bound(path), 66 * kMiB);
  // A header whose section table lies past the file's end bounds nothing.
  f = std::fopen(path, "wb");
  std::fwrite(b.data(), 1, 1024, f);
  std::fclose(f);
  EXPECT_EQ(module_file_bound(path), kUnboundedModule);
  std::remove(path);
  EXPECT_EQ(module_file_bound("/nonexistent/module.cubin"), kModuleGranule);
}

}  // namespace
}  // namespace cushare::shim
