#include "tests/fakegpu/cuda/image_format.hpp"

#include <algorithm>
#include <cstring>

#include "tests/fakegpu/cuda/size_math.hpp"

namespace fakegpu {

namespace {

template <typename T>
bool read(std::string_view image, uint64_t at, T* out) {
  if (at > image.size() || sizeof(T) > image.size() - at) return false;
  std::memcpy(out, image.data() + at, sizeof(T));
  return true;
}

std::string_view slice(std::string_view image, uint64_t offset, uint64_t size) {
  if (offset > image.size() || size > image.size() - offset) return {};
  return image.substr(offset, size);
}

std::string_view c_string(std::string_view strings, uint32_t at) {
  if (at >= strings.size()) return {};
  const size_t end = strings.find('\0', at);
  return strings.substr(at, end == std::string_view::npos ? end : end - at);
}

}  // namespace

bool is_elf(std::string_view image) {
  return image.substr(0, 4) == std::string_view(
                                   "\x7f"
                                   "ELF",
                                   4);
}

std::vector<ElfSection> elf_sections(std::string_view elf) {
  std::vector<ElfSection> out;
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  if (!is_elf(elf) || !read(elf, 0x28, &shoff) || !read(elf, 0x3A, &shentsize) ||
      !read(elf, 0x3C, &shnum) || !read(elf, 0x3E, &shstrndx)) {
    return out;
  }
  std::vector<uint32_t> names;
  for (uint16_t i = 0; i < shnum; ++i) {
    uint64_t at = 0, offset = 0;
    uint32_t name = 0;
    ElfSection s;
    if (!mul_size(i, shentsize, &at) || !add_size(at, shoff, &at) || !read(elf, at, &name) ||
        !read(elf, at + 0x04, &s.type) || !read(elf, at + 0x18, &offset) ||
        !read(elf, at + 0x20, &s.size) || !read(elf, at + 0x28, &s.link) ||
        !read(elf, at + 0x2C, &s.info)) {
      break;
    }
    if (s.type != kShtNobits) s.data = slice(elf, offset, s.size);
    out.push_back(s);
    names.push_back(name);
  }
  if (shstrndx != 0 && shstrndx < out.size()) {
    for (size_t i = 0; i < out.size(); ++i) out[i].name = c_string(out[shstrndx].data, names[i]);
  }
  return out;
}

std::vector<ElfSymbol> elf_symbols(std::string_view elf, const std::vector<ElfSection>& sections) {
  (void)elf;
  std::vector<ElfSymbol> out;
  for (const ElfSection& table : sections) {
    if (table.type != kShtSymtab || table.link >= sections.size()) continue;
    const std::string_view strings = sections[table.link].data;
    for (uint64_t at = 0; at + 24 <= table.data.size(); at += 24) {
      uint32_t name = 0;
      uint8_t info = 0;
      ElfSymbol s;
      (void)read(table.data, at, &name);
      (void)read(table.data, at + 4, &info);
      (void)read(table.data, at + 5, &s.other);
      (void)read(table.data, at + 6, &s.section);
      (void)read(table.data, at + 16, &s.size);
      s.name = c_string(strings, name);
      s.type = info & 0xF;
      s.binding = info >> 4;
      s.index = static_cast<uint32_t>(at / 24);
      out.push_back(s);
    }
  }
  return out;
}

int elf_sm(std::string_view elf) {
  uint8_t abi = 0;
  uint32_t flags = 0;
  if (!is_elf(elf) || !read(elf, 8, &abi) || !read(elf, 0x30, &flags)) return 0;
  // From ABI version 8 (CUDA 12.8 on) the SM is the second byte of the flags;
  // before, the first.
  return static_cast<int>(abi >= 8 ? (flags >> 8) & 0xFF : flags & 0xFF);
}

bool is_fatbin(std::string_view image) {
  uint32_t magic = 0;
  return read(image, 0, &magic) && magic == kFatbinMagic;
}

// {u32 magic, u16 version, u16 header size, u64 body size}, then entries of
// {u16 kind, u16, u32 header size, u64 payload size, ..., u64 flags at 40
// (0x2000: compressed)}.
std::vector<FatbinEntry> fatbin_entries(std::string_view fatbin) {
  std::vector<FatbinEntry> out;
  uint16_t header = 0;
  uint64_t body = 0;
  if (!is_fatbin(fatbin) || !read(fatbin, 6, &header) || !read(fatbin, 8, &body)) return out;
  uint64_t end = 0;
  if (!add_size(header, body, &end)) return out;
  end = std::min<uint64_t>(fatbin.size(), end);
  for (uint64_t at = header; at < end;) {
    FatbinEntry e;
    uint32_t entry_header = 0;
    uint64_t size = 0, flags = 0;
    if (!read(fatbin, at, &e.kind) || !read(fatbin, at + 4, &entry_header) ||
        !read(fatbin, at + 8, &size) || !read(fatbin, at + 40, &flags) || entry_header == 0) {
      break;
    }
    const uint64_t payload = at + entry_header;
    if (payload > end || size > end - payload) break;
    e.compressed = (flags & 0x2000) != 0;
    e.data = fatbin.substr(payload, size);
    if (e.kind == kFatbinPtx && !e.compressed) e.data = e.data.substr(0, e.data.find('\0'));
    out.push_back(e);
    at = payload + size;
  }
  return out;
}

}  // namespace fakegpu
