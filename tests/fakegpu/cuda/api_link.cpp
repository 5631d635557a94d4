// The JIT linker: cuLinkCreate, cuLinkAddData/cuLinkAddFile (PTX, cubins,
// fatbins, host objects and libraries with embedded fatbins), cuLinkComplete
// (resolves every input's extern functions and globals against the others'
// definitions and writes a cubin of all their kernels and globals), cuLinkDestroy.
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "tests/fakegpu/cuda/cubin_writer.hpp"
#include "tests/fakegpu/cuda/driver.hpp"
#include "tests/fakegpu/cuda/jit_log.hpp"
#include "tests/fakegpu/cuda/link_inputs.hpp"

using namespace fakegpu;

namespace {

struct LinkState {
  // The caller's options stay valid for the link's life; its logs and wall
  // time are written back through them as the link proceeds.
  unsigned count = 0;
  CUjit_option* options = nullptr;
  void** values = nullptr;
  unsigned info_capacity = 0, error_capacity = 0;
  int target_sm = 0;
  std::vector<LinkUnit> units;
  std::string error_log;
  std::string image;  // the linked cubin, owned until cuLinkDestroy
};

unsigned option_uint(const LinkState& s, CUjit_option which, unsigned otherwise) {
  const int i = find_option(s.count, s.options, which);
  return i < 0 ? otherwise : static_cast<unsigned>(reinterpret_cast<uintptr_t>(s.values[i]));
}

// The logs accumulate over the link: each report rewrites the whole log into
// the caller's buffers, within the sizes first given.
void report(LinkState& s) {
  if (const int i = find_option(s.count, s.options, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES); i >= 0)
    s.values[i] = reinterpret_cast<void*>(uintptr_t{s.info_capacity});
  if (const int i = find_option(s.count, s.options, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES); i >= 0)
    s.values[i] = reinterpret_cast<void*>(uintptr_t{s.error_capacity});
  fill_jit_logs(s.count, s.options, s.values, "", s.error_log.c_str());
}

void log_error(LinkState& s, const std::string& line) {
  if (!s.error_log.empty()) s.error_log += '\n';
  s.error_log += line;
}

LinkState* as_link(CUlinkState state) {
  return handle_object<LinkState>(state, HandleKind::link_state);
}

// Options cuLinkAddData/cuLinkAddFile refuse: they belong to the whole link.
bool input_options_valid(unsigned count, const CUjit_option* options, void** values) {
  if (count == 0) return true;
  if (options == nullptr || values == nullptr) return false;
  for (unsigned i = 0; i < count; ++i) {
    switch (options[i]) {
      case CU_JIT_WALL_TIME:
      case CU_JIT_INFO_LOG_BUFFER:
      case CU_JIT_ERROR_LOG_BUFFER:
      case CU_JIT_TARGET_FROM_CUCONTEXT:
      case CU_JIT_TARGET:
        return false;
      default:
        break;
    }
  }
  return true;
}

CUresult create(unsigned numOptions, CUjit_option* options, void** optionValues,
                CUlinkState* stateOut) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (stateOut == nullptr || (numOptions > 0 && (options == nullptr || optionValues == nullptr)))
    return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  if (CUresult r = need_context(&ctx); r != CUDA_SUCCESS) return r;
  auto* s = new LinkState();
  s->count = numOptions;
  s->options = options;
  s->values = optionValues;
  s->info_capacity = option_uint(*s, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, 0);
  s->error_capacity = option_uint(*s, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, 0);
  const DeviceSlot& d = driver().file->state().devices[ctx->device];
  // CU_JIT_TARGET names the architecture as the SM number (CU_TARGET_COMPUTE_90 = 90).
  s->target_sm = static_cast<int>(option_uint(*s, CU_JIT_TARGET, d.cc_major * 10 + d.cc_minor));
  report(*s);
  register_handle(s, HandleKind::link_state);
  *stateOut = reinterpret_cast<CUlinkState>(s);
  return CUDA_SUCCESS;
}

CUresult add_data(CUlinkState state, CUjitInputType type, const void* data, size_t size,
                  const char* name, unsigned numOptions, CUjit_option* options,
                  void** optionValues) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  LinkState* s = as_link(state);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (data == nullptr || size == 0 || type < CU_JIT_INPUT_CUBIN || type >= CU_JIT_NUM_INPUT_TYPES ||
      !input_options_valid(numOptions, options, optionValues)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::string why;
  const CUresult r = read_link_input(type, std::string_view(static_cast<const char*>(data), size),
                                     name ? name : "<input>", s->target_sm, &s->units, &why);
  if (r != CUDA_SUCCESS) log_error(*s, why);
  report(*s);
  return r;
}

CUresult add_file(CUlinkState state, CUjitInputType type, const char* path, unsigned numOptions,
                  CUjit_option* options, void** optionValues) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (as_link(state) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream in(path, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  return add_data(state, type, bytes.data(), bytes.size(), path, numOptions, options, optionValues);
}

// Every name defined once, every reference defined somewhere; the log names
// the inputs as nvlink does.
bool resolve(LinkState& s) {
  std::map<std::string, std::string> functions, globals;  // name -> defining input
  bool ok = true;
  auto define = [&](std::map<std::string, std::string>& defined, const std::string& name,
                    const std::string& unit) {
    const auto [it, fresh] = defined.emplace(name, unit);
    if (!fresh) {
      log_error(s, "nvlink error   : Multiple definition of '" + name + "' in '" + unit +
                       "', first defined in '" + it->second + "'");
      ok = false;
    }
  };
  for (const LinkUnit& u : s.units) {
    for (const CubinFunction& f : u.functions) define(functions, f.name, u.name);
    for (const auto& [name, bytes] : u.globals) define(globals, name, u.name);
  }
  for (const LinkUnit& u : s.units) {
    for (const std::string& name : u.function_refs) {
      if (!functions.contains(name)) {
        log_error(s, "nvlink error   : Undefined reference to '" + name + "' in '" + u.name + "'");
        ok = false;
      }
    }
    for (const std::string& name : u.global_refs) {
      if (!globals.contains(name)) {
        log_error(s, "nvlink error   : Undefined reference to '" + name + "' in '" + u.name + "'");
        ok = false;
      }
    }
  }
  return ok;
}

CUresult complete(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  LinkState* s = as_link(state);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (cubinOut == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto start = std::chrono::steady_clock::now();
  const bool ok = resolve(*s);
  if (ok) {
    CubinContents c;
    c.sm = s->target_sm;
    c.functions.clear();
    for (const LinkUnit& u : s->units) {
      c.functions.insert(c.functions.end(), u.functions.begin(), u.functions.end());
      c.globals.insert(c.globals.end(), u.globals.begin(), u.globals.end());
    }
    s->image = write_cubin(c);
    *cubinOut = s->image.data();
    if (sizeOut) *sizeOut = s->image.size();
  }
  if (const int i = find_option(s->count, s->options, CU_JIT_WALL_TIME); i >= 0) {
    const float ms =
        std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::memcpy(&s->values[i], &ms, sizeof ms);  // the float travels in the pointer-sized slot
  }
  report(*s);
  // An unresolved or repeated symbol fails the link as a PTX error would.
  return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_PTX;
}

}  // namespace

FAKEGPU_API CUresult cuLinkCreate(unsigned int numOptions, CUjit_option* options,
                                  void** optionValues, CUlinkState* stateOut) {
  return create(numOptions, options, optionValues, stateOut);
}

FAKEGPU_API CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option* options,
                                     void** optionValues, CUlinkState* stateOut) {
  return create(numOptions, options, optionValues, stateOut);
}

FAKEGPU_API CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void* data, size_t size,
                                   const char* name, unsigned int numOptions, CUjit_option* options,
                                   void** optionValues) {
  return add_data(state, type, data, size, name, numOptions, options, optionValues);
}

FAKEGPU_API CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void* data,
                                      size_t size, const char* name, unsigned int numOptions,
                                      CUjit_option* options, void** optionValues) {
  return add_data(state, type, data, size, name, numOptions, options, optionValues);
}

FAKEGPU_API CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char* path,
                                   unsigned int numOptions, CUjit_option* options,
                                   void** optionValues) {
  return add_file(state, type, path, numOptions, options, optionValues);
}

FAKEGPU_API CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char* path,
                                      unsigned int numOptions, CUjit_option* options,
                                      void** optionValues) {
  return add_file(state, type, path, numOptions, options, optionValues);
}

FAKEGPU_API CUresult cuLinkComplete(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  return complete(state, cubinOut, sizeOut);
}

FAKEGPU_API CUresult cuLinkDestroy(CUlinkState state) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (!unregister_handle(state, HandleKind::link_state)) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<LinkState*>(state);
  return CUDA_SUCCESS;
}
