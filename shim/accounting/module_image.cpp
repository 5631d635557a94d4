#include "shim/accounting/module_image.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace cushare::shim {
namespace {

constexpr std::uint32_t kFatbinWrapperMagic = 0x466243b1;  // __fatBinC_Wrapper_t
constexpr std::uint32_t kFatbinMagic = 0xBA55ED50;
constexpr std::uint32_t kShtNobits = 8;
constexpr std::uint64_t kShfAlloc = 0x2;

template <class T>
T read_at(const unsigned char* p, std::size_t offset) noexcept {
  T v;
  std::memcpy(&v, p + offset, sizeof v);
  return v;
}

bool add(std::uint64_t a, std::uint64_t b, std::uint64_t& sum) noexcept {
  return !__builtin_add_overflow(a, b, &sum);
}

std::uint64_t in_granules(std::uint64_t bytes) noexcept {
  std::uint64_t up = 0;
  if (!add(bytes, kModuleGranule - 1, up)) return kUnboundedModule;
  up -= up % kModuleGranule;
  return up < kModuleGranule ? kModuleGranule : up;
}

// An ELF64 cubin: up to the end of its section header table (the layout
// nvcc writes, and the extent the driver reads), plus every section that
// lives on the device. `known` is the mapped length when there is one (a
// file), so a truncated header cannot make the walk read past it.
std::uint64_t elf_bytes(const unsigned char* p, std::uint64_t known) noexcept {
  if (known != 0 && known < 0x40) return kUnboundedModule;
  const auto shoff = read_at<std::uint64_t>(p, 0x28);
  const auto shentsize = read_at<std::uint16_t>(p, 0x3A);
  const auto shnum = read_at<std::uint16_t>(p, 0x3C);
  std::uint64_t extent = 0;
  if (!add(shoff, std::uint64_t{shentsize} * shnum, extent)) return kUnboundedModule;
  if (known != 0 && extent > known) return kUnboundedModule;
  if (shentsize < 0x28) return extent;  // no section sizes to read
  std::uint64_t total = extent;
  for (std::uint16_t i = 0; i < shnum; ++i) {
    const unsigned char* sh = p + shoff + std::uint64_t{i} * shentsize;
    const auto type = read_at<std::uint32_t>(sh, 0x04);
    const auto flags = read_at<std::uint64_t>(sh, 0x08);
    const auto size = read_at<std::uint64_t>(sh, 0x20);
    if ((flags & kShfAlloc) == 0 && type != kShtNobits) continue;
    if (!add(total, size, total)) return kUnboundedModule;
  }
  return total;
}

std::uint64_t image_bytes(const unsigned char* p, std::uint64_t known, int depth) noexcept {
  const auto magic = read_at<std::uint32_t>(p, 0);
  if (magic == kFatbinWrapperMagic && known == 0 && depth == 0) {
    const auto* data = read_at<const unsigned char*>(p, 8);
    return data ? image_bytes(data, 0, depth + 1) : 0;
  }
  if (magic == kFatbinMagic) {  // { magic, u16 version, u16 header size, u64 fat size }
    std::uint64_t total = 0;
    if (!add(read_at<std::uint16_t>(p, 6), read_at<std::uint64_t>(p, 8), total))
      return kUnboundedModule;
    return total;
  }
  if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') return elf_bytes(p, known);
  // PTX: text up to its NUL (a file's whole length when it has none).
  if (known) {
    const void* nul = std::memchr(p, 0, known);
    return nul ? static_cast<std::uint64_t>(static_cast<const unsigned char*>(nul) - p) : known;
  }
  return std::strlen(reinterpret_cast<const char*>(p));
}

}  // namespace

std::uint64_t module_image_bound(const void* image) noexcept {
  if (!image) return kModuleGranule;
  const std::uint64_t bytes = image_bytes(static_cast<const unsigned char*>(image), 0, 0);
  return bytes == kUnboundedModule ? bytes : in_granules(bytes);
}

std::uint64_t module_file_bound(const char* path) noexcept {
  if (!path) return kModuleGranule;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kModuleGranule;
  struct stat sb {};
  std::uint64_t bytes = 0;
  if (fstat(fd, &sb) == 0 && sb.st_size >= 0x40) {
    const auto size = static_cast<std::size_t>(sb.st_size);
    void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map != MAP_FAILED) {
      bytes = image_bytes(static_cast<const unsigned char*>(map), size, 0);
      munmap(map, size);
    } else {
      bytes = size;
    }
  } else if (sb.st_size > 0) {
    bytes = static_cast<std::uint64_t>(sb.st_size);
  }
  close(fd);
  return bytes == kUnboundedModule ? bytes : in_granules(bytes);
}

}  // namespace cushare::shim
