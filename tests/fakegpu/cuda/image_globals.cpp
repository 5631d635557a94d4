#include "tests/fakegpu/cuda/image_globals.hpp"

#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include "tests/fakegpu/cuda/image_format.hpp"
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

}  // namespace

bool ptx_variable(const std::string& statement, std::string_view space, std::string* name,
                  uint64_t* bytes) {
  std::istringstream words(statement.substr(0, statement.find('=')));
  std::vector<std::string> w;
  for (std::string s; words >> s;) w.push_back(s);
  bool in_space = false;
  uint64_t element = 0, vector = 1;
  size_t at = 0;
  for (; at < w.size(); ++at) {
    if (w[at] == ".extern" || w[at] == ".entry" || w[at] == ".func") return false;
    if (w[at] == space) in_space = true;
    if (w[at] == ".v2" || w[at] == ".v4") vector = static_cast<uint64_t>(w[at][2] - '0');
    if ((element = ptx_type_bytes(w[at])) != 0) break;
  }
  if (!in_space || element == 0 || ++at >= w.size()) return false;
  // The name, then its dimensions, possibly in the following words: `buf [4] [2]`.
  std::string rest;
  for (; at < w.size(); ++at) rest += w[at];
  const size_t bracket = rest.find('[');
  uint64_t total = element * vector;
  for (size_t open = bracket; open != std::string::npos; open = rest.find('[', open + 1)) {
    const uint64_t n = std::strtoull(rest.c_str() + open + 1, nullptr, 10);
    if (!mul_size(total, n == 0 ? 1 : n, &total)) return false;  // `[]` sized by its initialiser
  }
  *name = rest.substr(0, bracket);
  *bytes = total;
  return !name->empty();
}

void ptx_statements(std::string_view ptx,
                    const std::function<void(const std::string&, bool)>& each) {
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
      if (depth == 0) each(statement, true);
      ++depth;
      statement.clear();
    } else if (c == '}' && init_depth == 0) {
      depth = depth > 0 ? depth - 1 : 0;
      statement.clear();
    } else if (depth == 0 && c == ';' && init_depth == 0) {
      each(statement, false);
      statement.clear();
    } else if (depth == 0) {
      if (c == '{') ++init_depth;
      if (c == '}') --init_depth;
      statement += c;
    }
  }
}

namespace {

void ptx_declaration(const std::string& statement, std::map<std::string, uint64_t>& out) {
  std::string name;
  uint64_t bytes = 0;
  if (ptx_variable(statement, ".global", &name, &bytes) ||
      ptx_variable(statement, ".const", &name, &bytes)) {
    out[name] = bytes;
  }
}

void ptx_globals(std::string_view ptx, std::map<std::string, uint64_t>& out) {
  ptx_statements(ptx, [&](const std::string& statement, bool opens_body) {
    if (!opens_body) ptx_declaration(statement, out);
  });
}

void elf_globals(std::string_view elf, std::map<std::string, uint64_t>& out) {
  for (const ElfSymbol& s : elf_symbols(elf, elf_sections(elf))) {
    // An undefined symbol (section 0) is a reference to another image's global.
    if (s.type == kSttObject && s.section != 0 && !s.name.empty()) out.emplace(s.name, s.size);
  }
}

}  // namespace

std::map<std::string, uint64_t> image_globals(std::string_view image, bool ptx) {
  std::map<std::string, uint64_t> out;
  if (ptx) {
    ptx_globals(image, out);
  } else if (is_fatbin(image)) {
    // Compressed entries are opaque: their globals are not found.
    for (const FatbinEntry& e : fatbin_entries(image)) {
      if (e.compressed) continue;
      if (e.kind == kFatbinPtx) ptx_globals(e.data, out);
      if (e.kind == kFatbinElf) elf_globals(e.data, out);
    }
  } else if (is_elf(image)) {
    elf_globals(image, out);
  }
  return out;
}

}  // namespace fakegpu
