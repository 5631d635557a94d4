#include "tests/fakegpu/cuda/link_inputs.hpp"

#include <sstream>

#include "tests/fakegpu/cuda/image_format.hpp"
#include "tests/fakegpu/cuda/image_globals.hpp"

namespace fakegpu {

namespace {

std::vector<std::string> words_of(const std::string& statement) {
  std::istringstream in(statement);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  return w;
}

bool has(const std::vector<std::string>& words, std::string_view w) {
  for (const std::string& s : words) {
    if (s == w) return true;
  }
  return false;
}

// The name of the function a `.entry`/`.func` statement declares, after the
// keyword and an optional return parameter list: `.func (.param .b32 r) name(...)`.
std::string function_name(const std::string& statement, std::string_view keyword) {
  size_t at = statement.find(keyword);
  if (at == std::string::npos) return {};
  at = statement.find_first_not_of(" \t\r\n", at + keyword.size());
  if (at != std::string::npos && statement[at] == '(') {
    at = statement.find(')', at);
    if (at != std::string::npos) at = statement.find_first_not_of(" \t\r\n", at + 1);
  }
  if (at == std::string::npos) return {};
  const size_t end = statement.find_first_of(" \t\r\n(", at);
  return statement.substr(at, end == std::string::npos ? end : end - at);
}

CUresult read_ptx(std::string_view ptx, LinkUnit& unit, std::string* why) {
  if (ptx.find(".version") == std::string_view::npos ||
      ptx.find(".target") == std::string_view::npos) {
    *why = "ptxas fatal   : '" + unit.name + "': not PTX (no .version or .target directive)";
    return CUDA_ERROR_INVALID_PTX;
  }
  ptx_statements(ptx, [&](const std::string& statement, bool body) {
    const std::vector<std::string> w = words_of(statement);
    const bool external = has(w, ".extern");
    if (has(w, ".entry")) {
      const std::string name = function_name(statement, ".entry");
      if (body) unit.functions.push_back({name, kernel_resources(ptx, true, name), true});
    } else if (has(w, ".func")) {
      const std::string name = function_name(statement, ".func");
      if (body) unit.functions.push_back({name, {}, false});
      if (external) unit.function_refs.insert(name);
    } else if (external && (has(w, ".global") || has(w, ".const"))) {
      std::string declared = statement, name;
      declared.erase(declared.find(".extern"), 7);
      uint64_t bytes = 0;
      if (ptx_variable(declared, ".global", &name, &bytes) ||
          ptx_variable(declared, ".const", &name, &bytes)) {
        unit.global_refs.insert(name);
      }
    }
  });
  unit.globals = image_globals(ptx, true);
  return CUDA_SUCCESS;
}

CUresult read_elf(std::string_view elf, LinkUnit& unit, std::string* why) {
  if (!is_elf(elf)) {
    *why = "nvlink error   : '" + unit.name + "' is not a cubin";
    return CUDA_ERROR_INVALID_IMAGE;
  }
  for (const ElfSymbol& s : elf_symbols(elf, elf_sections(elf))) {
    if (s.name.empty() || (s.type != kSttFunc && s.type != kSttObject)) continue;
    const std::string name(s.name);
    if (s.section == 0) {
      // Weak undefined symbols (.nv.reservedSmem.*) are the driver's, not another input's.
      if (s.binding == kStbWeak) continue;
      (s.type == kSttFunc ? unit.function_refs : unit.global_refs).insert(name);
    } else if (s.type == kSttFunc) {
      const bool entry = (s.other & kStoCudaEntry) != 0;
      unit.functions.push_back(
          {name, entry ? kernel_resources(elf, false, name) : KernelResources{}, entry});
    } else {
      unit.globals.emplace(name, s.size);
    }
  }
  return CUDA_SUCCESS;
}

// A fatbin links through its cubin for the target (else its first cubin),
// else through its PTX.
CUresult read_fatbin(std::string_view fatbin, int target_sm, LinkUnit& unit, std::string* why) {
  const FatbinEntry* elf = nullptr;
  const FatbinEntry* ptx = nullptr;
  const std::vector<FatbinEntry> entries = fatbin_entries(fatbin);
  for (const FatbinEntry& e : entries) {
    if (e.compressed) continue;
    if (e.kind == kFatbinElf && (elf == nullptr || elf_sm(e.data) == target_sm)) elf = &e;
    if (e.kind == kFatbinPtx && ptx == nullptr) ptx = &e;
  }
  if (elf != nullptr) return read_elf(elf->data, unit, why);
  if (ptx != nullptr) return read_ptx(ptx->data, unit, why);
  *why = "nvlink error   : '" + unit.name + "': no uncompressed cubin or PTX in the fatbin";
  return CUDA_ERROR_INVALID_IMAGE;
}

// Host objects and archives carry their device code as embedded fatbins
// (nvcc's .nv_fatbin sections), found by their magic at 8-byte alignment.
CUresult read_host_code(std::string_view data, int target_sm, const std::string& name,
                        std::vector<LinkUnit>* units, std::string* why) {
  for (size_t at = 0; at + 16 <= data.size(); at += 8) {
    const std::string_view rest = data.substr(at);
    if (!is_fatbin(rest)) continue;
    LinkUnit unit;
    unit.name = name;
    if (CUresult r = read_fatbin(rest, target_sm, unit, why); r != CUDA_SUCCESS) return r;
    units->push_back(std::move(unit));
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult read_link_input(CUjitInputType type, std::string_view data, const std::string& name,
                         int target_sm, std::vector<LinkUnit>* units, std::string* why) {
  LinkUnit unit;
  unit.name = name;
  CUresult r = CUDA_SUCCESS;
  switch (type) {
    case CU_JIT_INPUT_PTX:
      r = read_ptx(data.substr(0, data.find('\0')), unit, why);
      break;
    case CU_JIT_INPUT_CUBIN:
      r = read_elf(data, unit, why);
      break;
    case CU_JIT_INPUT_FATBINARY:
      r = read_fatbin(data, target_sm, unit, why);
      break;
    case CU_JIT_INPUT_OBJECT:
    case CU_JIT_INPUT_LIBRARY: {
      const bool object = type == CU_JIT_INPUT_OBJECT;
      if (object ? !is_elf(data) : data.substr(0, 8) != "!<arch>\n") {
        *why =
            "nvlink error   : '" + unit.name + "' is not a host " + (object ? "object" : "library");
        return CUDA_ERROR_INVALID_IMAGE;
      }
      return read_host_code(data, target_sm, unit.name, units, why);
    }
    default:
      *why = "fakegpu: LTO-IR (CU_JIT_INPUT_NVVM) is not linked";
      return CUDA_ERROR_INVALID_IMAGE;
  }
  if (r == CUDA_SUCCESS) units->push_back(std::move(unit));
  return r;
}

}  // namespace fakegpu
