#include "tests/fakegpu/cuda/cubin_writer.hpp"

#include <cstring>

#include "tests/fakegpu/cuda/image_format.hpp"

namespace fakegpu {

namespace {

constexpr uint32_t kShtProgbits = 1, kShtStrtab = 3, kShtNvInfo = 0x70000000;
constexpr uint8_t kStbGlobal = 1;
// From sm_90 on, the 1 KiB the driver reserves per block opens each kernel's
// shared section (kernel_resources.cpp takes it off again).
constexpr uint64_t kReservedSmem = 1024;

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// An EIFMT_SVAL .nv.info record: {4, attribute, u16 size} and its words.
void record(std::string& out, uint8_t attribute, std::initializer_list<uint32_t> words) {
  out += '\x04';
  out += static_cast<char>(attribute);
  put<uint16_t>(out, static_cast<uint16_t>(words.size() * 4));
  for (uint32_t w : words) put(out, w);
}

struct Section {
  std::string name;
  uint32_t type = kShtProgbits;
  std::string data;
  uint64_t size = 0;  // SHT_NOBITS only
  uint32_t link = 0, info = 0;
};

class Symbols {
 public:
  uint32_t add(const std::string& name, uint8_t type, uint8_t other, uint16_t section,
               uint64_t size, uint8_t binding = kStbGlobal) {
    put(table_, static_cast<uint32_t>(strings_.size()));
    table_ += static_cast<char>(binding << 4 | type);
    table_ += static_cast<char>(other);
    put(table_, section);
    put<uint64_t>(table_, 0);
    put(table_, size);
    strings_ += name + '\0';
    return static_cast<uint32_t>(table_.size() / 24 - 1);
  }
  const std::string& table() const { return table_; }
  const std::string& strings() const { return strings_; }

 private:
  std::string strings_ = std::string(1, '\0');
  std::string table_ = std::string(24, '\0');  // symbol 0 is the undefined one
};

std::string layout(std::vector<Section>& sections, int sm) {
  std::string names(1, '\0');
  std::vector<uint32_t> name_at;
  for (const Section& s : sections) {
    name_at.push_back(static_cast<uint32_t>(names.size()));
    names += s.name + '\0';
  }
  sections[1].data = names;
  std::string elf(64, '\0');
  std::memcpy(elf.data(),
              "\x7f"
              "ELF\x02\x01\x01",
              7);
  elf[8] = 8;  // ABI version 8: the SM is the second byte of the flags
  const uint32_t flags = static_cast<uint32_t>(sm) << 8;
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
    const uint64_t size = s.type == kShtNobits ? s.size : s.data.size();
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

}  // namespace

std::string write_cubin(const CubinContents& c) {
  // null, .shstrtab, .strtab, .symtab, .nv.info, .nv.global, then one .text per function.
  constexpr uint16_t kGlobalSection = 5, kFirstText = 6;
  std::vector<Section> sections(1);
  Symbols symbols;
  std::string info;
  for (size_t i = 0; i < c.functions.size(); ++i) {
    const CubinFunction& f = c.functions[i];
    const uint32_t index = symbols.add(f.name, kSttFunc, f.entry ? kStoCudaEntry : 0,
                                       static_cast<uint16_t>(kFirstText + i), 16);
    record(info, 0x2f, {index, static_cast<uint32_t>(f.resources.regs)});
    record(info, 0x11, {index, static_cast<uint32_t>(f.resources.local_bytes)});
  }
  uint64_t global_bytes = 0;
  for (const auto& [name, size] : c.globals) {
    symbols.add(name, kSttObject, 0, kGlobalSection, size);
    global_bytes += size;
  }
  for (const std::string& name : c.undefined_functions) symbols.add(name, kSttFunc, 0, 0, 0);
  sections.push_back({".shstrtab", kShtStrtab});
  sections.push_back({".strtab", kShtStrtab, symbols.strings()});
  sections.push_back({".symtab", kShtSymtab, symbols.table(), 0, 2, 0});
  sections.push_back({".nv.info", kShtNvInfo, info, 0, 3, 0});
  sections.push_back({".nv.global", kShtNobits, {}, global_bytes});
  for (const CubinFunction& f : c.functions)
    sections.push_back({".text." + f.name, kShtProgbits, std::string(16, '\0'), 0, 3, 0});
  const uint64_t reserved = c.sm >= 90 ? kReservedSmem : 0;
  for (const CubinFunction& f : c.functions) {
    if (!f.entry) continue;
    std::string own;
    if (f.resources.max_threads != 0)
      record(own, 0x05, {static_cast<uint32_t>(f.resources.max_threads), 1, 1});
    sections.push_back({".nv.info." + f.name, kShtNvInfo, own, 0, 3, 0});
    if (f.resources.static_smem != 0)
      sections.push_back(
          {".nv.shared." + f.name, kShtNobits, {}, f.resources.static_smem + reserved});
  }
  if (reserved != 0) sections.push_back({".nv.shared.reserved.0", kShtNobits, {}, 0});
  return layout(sections, c.sm);
}

}  // namespace fakegpu
