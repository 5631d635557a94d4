#include "tests/fakegpu/cuda/image_globals.hpp"

#include <cstring>
#include <sstream>
#include <vector>

#include "tests/fakegpu/cuda/size_math.hpp"

namespace fakegpu {

namespace {

// Bytes of a PTX fundamental type (.b8 ... .f64); 0 if `t` is none.
uint64_t ptx_type_bytes(std::string_view t) {
  if (t.size() < 3 || t[0] != '.' || std::strchr("bsuf", t[1]) == nullptr) return 0;
  const std::string_view bits = t.substr(2);
  if (bits == "8") return 1;
  if (bits == "16") return 2;
  if (bits == "32") return 4;
  if (bits == "64") return 8;
  return 0;
}

// One module-scope PTX statement, e.g. `.visible .global .align 4 .b8 buf[16][2] = {...}`:
// a defined (not .extern) variable in the global or constant state space.
void ptx_declaration(const std::string& statement, std::map<std::string, uint64_t>& out) {
  std::istringstream words(statement.substr(0, statement.find('=')));
  std::vector<std::string> w;
  for (std::string s; words >> s;) w.push_back(s);
  bool variable = false;
  uint64_t element = 0, vector = 1;
  size_t at = 0;
  for (; at < w.size(); ++at) {
    if (w[at] == ".extern" || w[at] == ".entry" || w[at] == ".func") return;
    if (w[at] == ".global" || w[at] == ".const") variable = true;
    if (w[at] == ".v2" || w[at] == ".v4") vector = w[at][2] - '0';
    if ((element = ptx_type_bytes(w[at])) != 0) break;
  }
  if (!variable || element == 0 || ++at >= w.size()) return;
  // The name, then its dimensions, possibly in the following words: `buf [4] [2]`.
  std::string rest;
  for (; at < w.size(); ++at) rest += w[at];
  const size_t bracket = rest.find('[');
  const std::string name = rest.substr(0, bracket);
  uint64_t bytes = element * vector;
  for (size_t open = bracket; open != std::string::npos; open = rest.find('[', open + 1)) {
    const uint64_t n = std::strtoull(rest.c_str() + open + 1, nullptr, 10);
    if (!mul_size(bytes, n == 0 ? 1 : n, &bytes)) return;  // `[]` sized by its initialiser
  }
  if (!name.empty()) out[name] = bytes;
}

void ptx_globals(std::string_view ptx, std::map<std::string, uint64_t>& out) {
  std::string statement;
  int depth = 0, init_depth = 0;
  for (size_t i = 0; i < ptx.size(); ++i) {
    const char c = ptx[i];
    if (c == '/' && i + 1 < ptx.size() && (ptx[i + 1] == '/' || ptx[i + 1] == '*')) {
      const bool line = ptx[i + 1] == '/';
      const size_t end = ptx.find(line ? "\n" : "*/", i + 2);
      if (end == std::string_view::npos) break;
      i = end + (line ? 0 : 1);
      continue;
    }
    // Braces after `=` belong to an initialiser, all others open or close a body.
    const bool initialiser = depth == 0 && statement.find('=') != std::string::npos;
    if (c == '{' && !initialiser) {
      ++depth;
      statement.clear();
    } else if (c == '}' && init_depth == 0) {
      depth = depth > 0 ? depth - 1 : 0;
      statement.clear();
    } else if (depth == 0 && c == ';' && init_depth == 0) {
      ptx_declaration(statement, out);
      statement.clear();
    } else if (depth == 0) {
      if (c == '{') ++init_depth;
      if (c == '}') --init_depth;
      statement += c;
    }
  }
}

template <typename T>
bool read(std::string_view image, uint64_t at, T* out) {
  if (at > image.size() || sizeof(T) > image.size() - at) return false;
  std::memcpy(out, image.data() + at, sizeof(T));
  return true;
}

// The object symbols (STT_OBJECT) of a 64-bit little-endian ELF cubin.
void elf_globals(std::string_view elf, std::map<std::string, uint64_t>& out) {
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0;
  if (!read(elf, 0x28, &shoff) || !read(elf, 0x3A, &shentsize) || !read(elf, 0x3C, &shnum)) return;
  auto section = [&](uint64_t index, uint32_t* type, uint64_t* offset, uint64_t* size,
                     uint32_t* link) {
    uint64_t at = 0;
    return mul_size(index, shentsize, &at) && add_size(at, shoff, &at) &&
           read(elf, at + 0x04, type) && read(elf, at + 0x18, offset) &&
           read(elf, at + 0x20, size) && read(elf, at + 0x28, link);
  };
  for (uint16_t i = 0; i < shnum; ++i) {
    uint32_t type = 0, link = 0, strtype = 0, strlink = 0;
    uint64_t offset = 0, size = 0, stroff = 0, strsize = 0;
    if (!section(i, &type, &offset, &size, &link) || type != 2 /* SHT_SYMTAB */) continue;
    if (!section(link, &strtype, &stroff, &strsize, &strlink)) continue;
    for (uint64_t s = 0; s + 24 <= size; s += 24) {
      uint32_t name = 0;
      uint8_t info = 0;
      uint64_t bytes = 0;
      if (!read(elf, offset + s, &name) || !read(elf, offset + s + 4, &info) ||
          !read(elf, offset + s + 16, &bytes)) {
        break;
      }
      if ((info & 0xF) != 1 /* STT_OBJECT */ || stroff >= elf.size()) continue;
      const std::string_view strings = elf.substr(stroff, strsize);
      if (name >= strings.size()) continue;
      const std::string_view symbol = strings.substr(name, strings.find('\0', name) - name);
      if (!symbol.empty()) out.emplace(symbol, bytes);
    }
  }
}

// The entries of a fatbin: {u16 kind (1 PTX, 2 ELF), u16, u32 header size,
// u64 payload size, ..., u64 flags at 40 (0x2000: compressed)}.
void fatbin_globals(std::string_view fatbin, std::map<std::string, uint64_t>& out) {
  uint16_t header = 0;
  uint64_t body = 0;
  if (!read(fatbin, 6, &header) || !read(fatbin, 8, &body)) return;
  const uint64_t end = std::min<uint64_t>(fatbin.size(), header + body);
  for (uint64_t at = header; at < end;) {
    uint16_t kind = 0;
    uint32_t entry_header = 0;
    uint64_t size = 0, flags = 0;
    if (!read(fatbin, at, &kind) || !read(fatbin, at + 4, &entry_header) ||
        !read(fatbin, at + 8, &size) || !read(fatbin, at + 40, &flags) || entry_header == 0) {
      return;
    }
    const uint64_t payload = at + entry_header;
    if (payload > end || size > end - payload) return;
    if ((flags & 0x2000) == 0) {
      const std::string_view data = fatbin.substr(payload, size);
      if (kind == 1) ptx_globals(data.substr(0, data.find('\0')), out);
      if (kind == 2) elf_globals(data, out);
    }
    at = payload + size;
  }
}

}  // namespace

std::map<std::string, uint64_t> image_globals(std::string_view image, bool ptx) {
  std::map<std::string, uint64_t> out;
  uint32_t magic = 0;
  if (ptx) {
    ptx_globals(image, out);
  } else if (read(image, 0, &magic) && magic == 0xBA55ED50) {
    fatbin_globals(image, out);
  } else if (image.substr(0, 4) ==
             "\x7f"
             "ELF") {
    elf_globals(image, out);
  }
  return out;
}

}  // namespace fakegpu
