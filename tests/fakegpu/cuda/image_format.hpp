#pragma once
// Read-only views of the binary images a module may be made of: 64-bit
// little-endian ELF cubins (sections, symbols, the SM they are built for) and
// fatbins (their PTX and ELF entries). Every offset and size in an image is
// bounds-checked: a truncated or garbage image yields fewer entries, never a
// read outside it.
#include <cstdint>
#include <string_view>
#include <vector>

namespace fakegpu {

struct ElfSection {
  std::string_view name;  // empty where the image has no section name table
  uint32_t type = 0;
  uint32_t link = 0;
  uint32_t info = 0;
  uint64_t size = 0;
  std::string_view data;  // empty for SHT_NOBITS and out-of-bounds sections
};

struct ElfSymbol {
  std::string_view name;
  uint8_t type = 0;     // STT_OBJECT 1, STT_FUNC 2
  uint8_t binding = 0;  // STB_LOCAL 0, STB_GLOBAL 1, STB_WEAK 2
  uint8_t other = 0;    // STO_CUDA_ENTRY (0x10) marks a kernel
  uint16_t section = 0;
  uint64_t size = 0;
  uint32_t index = 0;  // position in the symbol table, as .nv.info records name functions
};

inline constexpr uint32_t kShtSymtab = 2;
inline constexpr uint32_t kShtNobits = 8;
inline constexpr uint8_t kSttObject = 1;
inline constexpr uint8_t kSttFunc = 2;
inline constexpr uint8_t kStbWeak = 2;
inline constexpr uint8_t kStoCudaEntry = 0x10;

bool is_elf(std::string_view image);
std::vector<ElfSection> elf_sections(std::string_view elf);
// The symbols of every symbol table.
std::vector<ElfSymbol> elf_symbols(std::string_view elf, const std::vector<ElfSection>& sections);
// The SM the cubin's code is for (90 for sm_90), from its ELF header flags;
// 0 if the image is not an ELF.
int elf_sm(std::string_view elf);

inline constexpr uint32_t kFatbinMagic = 0xBA55ED50;

struct FatbinEntry {
  uint16_t kind = 0;  // 1 PTX, 2 ELF
  bool compressed = false;
  std::string_view data;  // PTX up to its first NUL
};

inline constexpr uint16_t kFatbinPtx = 1;
inline constexpr uint16_t kFatbinElf = 2;

bool is_fatbin(std::string_view image);
std::vector<FatbinEntry> fatbin_entries(std::string_view fatbin);

}  // namespace fakegpu
