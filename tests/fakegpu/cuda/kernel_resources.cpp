#include "tests/fakegpu/cuda/kernel_resources.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/fakegpu/cuda/image_format.hpp"
#include "tests/fakegpu/cuda/image_globals.hpp"

namespace fakegpu {

namespace {

// .nv.info attribute records: {u8 format, u8 attribute, u16 value or size};
// format 4 (EIFMT_SVAL) is followed by `size` payload bytes.
constexpr uint8_t kFormatSized = 4;
constexpr uint8_t kAttrMaxThreads = 0x05;  // EIATTR_MAX_THREADS {x, y, z}
constexpr uint8_t kAttrReqNtid = 0x10;     // EIATTR_REQNTID {x, y, z}
constexpr uint8_t kAttrFrameSize = 0x11;   // EIATTR_FRAME_SIZE {symbol, bytes}
constexpr uint8_t kAttrRegCount = 0x2f;    // EIATTR_REGCOUNT {symbol, registers}

// sm_90 and later cubins place the 1 KiB the driver reserves per block at the
// start of each kernel's shared section; ptxas and the driver do not count it
// as the kernel's static shared memory.
constexpr uint64_t kReservedInSection = 1024;

template <typename F>
void each_record(std::string_view info, F&& f) {
  for (size_t at = 0; at + 4 <= info.size();) {
    const auto format = static_cast<uint8_t>(info[at]);
    const auto attribute = static_cast<uint8_t>(info[at + 1]);
    uint16_t value = 0;
    std::memcpy(&value, info.data() + at + 2, 2);
    if (format != kFormatSized) {
      at += 4;
      continue;
    }
    if (value > info.size() - at - 4) return;
    f(attribute, info.substr(at + 4, value));
    at += 4 + size_t{value};
  }
}

uint32_t word(std::string_view payload, size_t i) {
  uint32_t v = 0;
  if (payload.size() >= (i + 1) * 4) std::memcpy(&v, payload.data() + i * 4, 4);
  return v;
}

int block_product(std::string_view payload) {
  uint64_t n = 1;
  for (size_t i = 0; i < 3 && i * 4 < payload.size(); ++i)
    n *= std::max<uint32_t>(1, word(payload, i));
  return static_cast<int>(std::min<uint64_t>(n, 1u << 30));
}

bool elf_resources(std::string_view elf, std::string_view name, KernelResources* out) {
  const std::vector<ElfSection> sections = elf_sections(elf);
  const std::vector<ElfSymbol> symbols = elf_symbols(elf, sections);
  const auto fn = std::find_if(symbols.begin(), symbols.end(), [&](const ElfSymbol& s) {
    return s.type == kSttFunc && s.name == name;
  });
  if (fn == symbols.end()) return false;
  KernelResources r;
  r.binary_version = r.ptx_version = elf_sm(elf);
  const std::string own_info = ".nv.info." + std::string(name);
  const std::string own_shared = ".nv.shared." + std::string(name);
  bool reserved_in_section = false;
  for (const ElfSection& s : sections) {
    if (s.name.starts_with(".nv.shared.reserved.")) reserved_in_section = true;
  }
  for (const ElfSection& s : sections) {
    if (s.name == ".nv.info") {
      each_record(s.data, [&](uint8_t attribute, std::string_view payload) {
        if (word(payload, 0) != fn->index) return;
        if (attribute == kAttrRegCount) r.regs = static_cast<int>(word(payload, 1));
        if (attribute == kAttrFrameSize) r.local_bytes = word(payload, 1);
      });
    } else if (s.name == own_info) {
      each_record(s.data, [&](uint8_t attribute, std::string_view payload) {
        if (attribute == kAttrMaxThreads || attribute == kAttrReqNtid) {
          const int bound = block_product(payload);
          r.max_threads = r.max_threads == 0 ? bound : std::min(r.max_threads, bound);
        }
      });
    } else if (s.name == own_shared) {
      r.static_smem = s.size;
      if (reserved_in_section && s.size >= kReservedInSection) r.static_smem -= kReservedInSection;
    }
  }
  *out = r;
  return true;
}

// Position of `.entry name` in PTX (the name followed by a space or '('), or npos.
size_t ptx_entry(std::string_view ptx, std::string_view name) {
  for (size_t at = ptx.find(".entry"); at != std::string_view::npos;
       at = ptx.find(".entry", at + 6)) {
    const size_t start = ptx.find_first_not_of(" \t\r\n", at + 6);
    if (start == std::string_view::npos) return start;
    const size_t end = ptx.find_first_of(" \t\r\n(", start);
    if (ptx.substr(start, end - start) == name) return end;
  }
  return std::string_view::npos;
}

// The numbers after a directive such as `.maxntid 256, 1, 1`, multiplied.
int directive_product(std::string_view text, std::string_view directive) {
  const size_t at = text.find(directive);
  if (at == std::string_view::npos) return 0;
  const std::string rest(text.substr(at + directive.size(), 64));
  const char* p = rest.c_str();
  uint64_t n = 1;
  for (int i = 0; i < 3; ++i) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(p, &end, 10);
    if (end == p) break;
    n *= std::max(1ul, v);
    p = end;
    while (*p == ' ' || *p == '\t' || *p == ',') ++p;
  }
  return static_cast<int>(std::min<uint64_t>(n, 1u << 30));
}

bool ptx_resources(std::string_view ptx, std::string_view name, KernelResources* out) {
  const size_t entry = ptx_entry(ptx, name);
  if (entry == std::string_view::npos) return false;
  KernelResources r;
  if (const size_t target = ptx.find(".target sm_"); target != std::string_view::npos)
    r.ptx_version = std::atoi(std::string(ptx.substr(target + 11, 4)).c_str());
  const size_t params_end = ptx.find(')', entry);
  const size_t body = ptx.find('{', entry);
  if (body == std::string_view::npos) return false;
  // Performance directives sit between the parameter list and the body.
  const std::string_view directives =
      ptx.substr(std::min(params_end, body), body - std::min(params_end, body));
  const int maxntid = directive_product(directives, ".maxntid");
  const int reqntid = directive_product(directives, ".reqntid");
  r.max_threads = maxntid != 0 && reqntid != 0 ? std::min(maxntid, reqntid) : maxntid + reqntid;
  if (const int maxnreg = directive_product(directives, ".maxnreg"); maxnreg > 0)
    r.regs = std::min(r.regs, maxnreg);
  int depth = 0;
  std::string statement;
  for (size_t i = body; i < ptx.size(); ++i) {
    const char c = ptx[i];
    if (c == '{') ++depth;
    if (c == '}' && --depth == 0) break;
    if (c == ';') {
      std::string var;
      uint64_t bytes = 0;
      if (ptx_variable(statement, ".shared", &var, &bytes)) r.static_smem += bytes;
      if (ptx_variable(statement, ".local", &var, &bytes)) r.local_bytes += bytes;
      statement.clear();
    } else if (c != '{' && c != '}') {
      statement += c;
    }
  }
  *out = r;
  return true;
}

}  // namespace

KernelResources kernel_resources(std::string_view image, bool ptx, std::string_view name) {
  KernelResources r;
  if (ptx) {
    ptx_resources(image, name, &r);
  } else if (is_elf(image)) {
    elf_resources(image, name, &r);
  } else if (is_fatbin(image)) {
    const std::vector<FatbinEntry> entries = fatbin_entries(image);
    bool found = false;
    for (const FatbinEntry& e : entries) {
      if (!found && !e.compressed && e.kind == kFatbinElf) found = elf_resources(e.data, name, &r);
    }
    for (const FatbinEntry& e : entries) {
      if (!found && !e.compressed && e.kind == kFatbinPtx) found = ptx_resources(e.data, name, &r);
    }
  }
  return r;
}

}  // namespace fakegpu
