#pragma once
// Hand-built module images for the API tests: a 64-bit ELF cubin laid out as
// nvcc lays out one (named sections, a symbol table, the .nv.info records of
// each kernel's registers, frame size and block bounds, a .nv.shared.<kernel>
// section per kernel with static shared memory) and a fatbin around it.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fakegpu_test {

struct CubinKernel {
  std::string name = "kernel";
  uint32_t regs = 0;         // 0: no EIATTR_REGCOUNT record
  uint32_t frame = 0;        // EIATTR_FRAME_SIZE
  uint32_t max_threads = 0;  // 0: no EIATTR_MAX_THREADS record
  uint64_t shared = 0;       // 0: no .nv.shared.<name> section
};

struct CubinSpec {
  int sm = 90;
  std::vector<CubinKernel> kernels = {CubinKernel{}};
  std::vector<std::pair<std::string, uint64_t>> objects;  // __device__ variables and their sizes
};

namespace cubin_detail {

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// An EIFMT_SVAL record: {4, attribute, u16 size} and its 32-bit words.
inline void record(std::string& out, uint8_t attribute, std::vector<uint32_t> words) {
  out += '\x04';
  out += static_cast<char>(attribute);
  put<uint16_t>(out, static_cast<uint16_t>(words.size() * 4));
  for (uint32_t w : words) put(out, w);
}

}  // namespace cubin_detail

inline std::string cubin(const CubinSpec& spec) {
  using cubin_detail::put;
  using cubin_detail::record;
  struct Section {
    std::string name;
    uint32_t type = 1;  // SHT_PROGBITS
    std::string data;
    uint64_t size = 0;  // for SHT_NOBITS
    uint32_t link = 0, info = 0;
  };
  std::vector<Section> sections(1);  // section 0 is the null one
  std::string strings(1, '\0');
  std::string symbols(24, '\0');  // symbol 0 is the undefined one
  auto symbol = [&](const std::string& name, uint8_t type, uint16_t section, uint64_t size) {
    put(symbols, static_cast<uint32_t>(strings.size()));
    symbols += static_cast<char>(0x10 | type);  // STB_GLOBAL
    symbols += '\0';
    put(symbols, section);
    put<uint64_t>(symbols, 0);
    put(symbols, size);
    strings += name + '\0';
    return static_cast<uint32_t>(symbols.size() / 24 - 1);
  };
  const uint16_t first_text = 5;  // after null, .shstrtab, .strtab, .symtab, .nv.info
  std::string info;
  for (size_t k = 0; k < spec.kernels.size(); ++k) {
    const CubinKernel& kernel = spec.kernels[k];
    const uint32_t index =
        symbol(kernel.name, 2 /* STT_FUNC */, static_cast<uint16_t>(first_text + k), 16);
    if (kernel.regs != 0) record(info, 0x2f, {index, kernel.regs});
    record(info, 0x11, {index, kernel.frame});
  }
  for (const auto& [name, size] : spec.objects) symbol(name, 1 /* STT_OBJECT */, 0, size);
  sections.push_back({".shstrtab", 3, {}, 0, 0, 0});
  sections.push_back({".strtab", 3, strings, 0, 0, 0});
  sections.push_back({".symtab", 2, symbols, 0, 2, 0});
  sections.push_back({".nv.info", 0x70000000, info, 0, 3, 0});
  for (const CubinKernel& kernel : spec.kernels)
    sections.push_back({".text." + kernel.name, 1, std::string(16, '\0'), 0, 3, 0});
  for (const CubinKernel& kernel : spec.kernels) {
    std::string own;
    if (kernel.max_threads != 0) record(own, 0x05, {kernel.max_threads, 1, 1});
    sections.push_back({".nv.info." + kernel.name, 0x70000000, own, 0, 3, 0});
    // From sm_90 on, nvcc places the 1 KiB the driver reserves at the start of the section.
    const uint64_t reserved = spec.sm >= 90 ? 1024 : 0;
    if (kernel.shared != 0)
      sections.push_back({".nv.shared." + kernel.name, 8, {}, kernel.shared + reserved, 0, 0});
  }
  if (spec.sm >= 90) sections.push_back({".nv.shared.reserved.0", 8, {}, 0, 0, 0});
  std::string names(1, '\0');
  std::vector<uint32_t> name_at;
  for (const Section& s : sections) {
    name_at.push_back(s.name.empty() ? 0 : static_cast<uint32_t>(names.size()));
    if (!s.name.empty()) names += s.name + '\0';
  }
  sections[1].data = names;
  std::string elf(64, '\0');
  std::memcpy(elf.data(),
              "\x7f"
              "ELF\x02\x01\x01",
              7);
  elf[8] = 8;  // ABI version 8: the SM is the second byte of the flags
  const uint32_t flags = static_cast<uint32_t>(spec.sm) << 8;
  std::memcpy(elf.data() + 0x30, &flags, 4);
  std::vector<uint64_t> offsets;
  for (const Section& s : sections) {
    offsets.push_back(elf.size());
    elf += s.data;
  }
  const uint64_t headers_at = elf.size();
  for (size_t i = 0; i < sections.size(); ++i) {
    const Section& s = sections[i];
    std::string h(64, '\0');
    const uint64_t size = s.type == 8 ? s.size : s.data.size();
    std::memcpy(h.data() + 0x00, &name_at[i], 4);
    std::memcpy(h.data() + 0x04, &s.type, 4);
    std::memcpy(h.data() + 0x18, &offsets[i], 8);
    std::memcpy(h.data() + 0x20, &size, 8);
    std::memcpy(h.data() + 0x28, &s.link, 4);
    std::memcpy(h.data() + 0x2C, &s.info, 4);
    elf += h;
  }
  const uint16_t entsize = 64, count = static_cast<uint16_t>(sections.size()), shstrndx = 1;
  std::memcpy(elf.data() + 0x28, &headers_at, 8);
  std::memcpy(elf.data() + 0x3A, &entsize, 2);
  std::memcpy(elf.data() + 0x3C, &count, 2);
  std::memcpy(elf.data() + 0x3E, &shstrndx, 2);
  return elf;
}

// A fatbin holding one entry (kind 1 PTX, 2 ELF), compressed (flag 0x2000) or not.
inline std::string fatbin(const std::string& payload, bool compressed, uint16_t kind = 2) {
  using cubin_detail::put;
  std::string entry(64, '\0');
  const uint32_t header = 64;
  const uint64_t size = payload.size(), flags = compressed ? 0x2000 : 0;
  std::memcpy(entry.data(), &kind, 2);
  std::memcpy(entry.data() + 4, &header, 4);
  std::memcpy(entry.data() + 8, &size, 8);
  std::memcpy(entry.data() + 40, &flags, 8);
  std::string out;
  put<uint32_t>(out, 0xBA55ED50);
  put<uint16_t>(out, 1);
  put<uint16_t>(out, 16);
  put<uint64_t>(out, entry.size() + payload.size());
  return out + entry + payload;
}

}  // namespace fakegpu_test
