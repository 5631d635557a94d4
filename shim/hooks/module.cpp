// Module and library loads and unloads: the device memory a loaded image
// takes is charged like an allocation (module_accounting.hpp), bounded from
// the image before the driver call.
#include "shim/accounting/module_accounting.hpp"
#include "shim/accounting/module_image.hpp"
#include "shim/hooks/decls.hpp"
#include "shim/hooks/support.hpp"

using namespace cushare::shim;

namespace {

CUresult unload_module(void* handle) noexcept {
  return real().cuModuleUnload(static_cast<CUmodule>(handle));
}

CUresult unload_library(void* handle) noexcept {
  return real().cuLibraryUnload(static_cast<CUlibrary>(handle));
}

template <class Handle, class Call>
CUresult load_module(const AllocationState& st, const char* api, std::uint64_t bound,
                     Handle* handle, Call&& call) {
  return charged_module_load(st, ModuleKind::kModule, api, bound,
                             reinterpret_cast<void* const*>(handle), call, &unload_module);
}

template <class Call>
CUresult load_library(const AllocationState& st, const char* api, std::uint64_t bound,
                      CUlibrary* library, Call&& call) {
  // cuLibraryUnload is as old as cuLibraryLoadData: a driver with one has both.
  if (!real().cuLibraryUnload) return call();
  return charged_module_load(st, ModuleKind::kLibrary, api, bound,
                             reinterpret_cast<void* const*>(library), call, &unload_library);
}

}  // namespace

extern "C" CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuModuleLoad)
  CUSHARE_ACCOUNT_OR(r.cuModuleLoad(module, fname))
  return load_module(*st, "cuModuleLoad", module_file_bound(fname), module,
                     [&] { return r.cuModuleLoad(module, fname); });
}

extern "C" CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuModuleLoadData)
  CUSHARE_ACCOUNT_OR(r.cuModuleLoadData(module, image))
  return load_module(*st, "cuModuleLoadData", module_image_bound(image), module,
                     [&] { return r.cuModuleLoadData(module, image); });
}

extern "C" CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                       CUjit_option* options, void** optionValues) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuModuleLoadDataEx)
  CUSHARE_ACCOUNT_OR(r.cuModuleLoadDataEx(module, image, numOptions, options, optionValues))
  return load_module(*st, "cuModuleLoadDataEx", module_image_bound(image), module, [&] {
    return r.cuModuleLoadDataEx(module, image, numOptions, options, optionValues);
  });
}

extern "C" CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuModuleLoadFatBinary)
  CUSHARE_ACCOUNT_OR(r.cuModuleLoadFatBinary(module, fatCubin))
  return load_module(*st, "cuModuleLoadFatBinary", module_image_bound(fatCubin), module,
                     [&] { return r.cuModuleLoadFatBinary(module, fatCubin); });
}

extern "C" CUresult cuModuleUnload(CUmodule hmod) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuModuleUnload)
  return charged_module_unload(allocation_state(), ModuleKind::kModule, hmod,
                               [&] { return r.cuModuleUnload(hmod); });
}

extern "C" CUresult cuLibraryLoadData(CUlibrary* library, const void* code,
                                      CUjit_option* jitOptions, void** jitOptionsValues,
                                      unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                                      void** libraryOptionValues, unsigned int numLibraryOptions) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuLibraryLoadData)
  const auto call = [&] {
    return r.cuLibraryLoadData(library, code, jitOptions, jitOptionsValues, numJitOptions,
                               libraryOptions, libraryOptionValues, numLibraryOptions);
  };
  CUSHARE_ACCOUNT_OR(call())
  return load_library(*st, "cuLibraryLoadData", module_image_bound(code), library, call);
}

extern "C" CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName,
                                          CUjit_option* jitOptions, void** jitOptionsValues,
                                          unsigned int numJitOptions,
                                          CUlibraryOption* libraryOptions,
                                          void** libraryOptionValues,
                                          unsigned int numLibraryOptions) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuLibraryLoadFromFile)
  const auto call = [&] {
    return r.cuLibraryLoadFromFile(library, fileName, jitOptions, jitOptionsValues, numJitOptions,
                                   libraryOptions, libraryOptionValues, numLibraryOptions);
  };
  CUSHARE_ACCOUNT_OR(call())
  return load_library(*st, "cuLibraryLoadFromFile", module_file_bound(fileName), library, call);
}

extern "C" CUresult cuLibraryUnload(CUlibrary library) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuLibraryUnload)
  return charged_module_unload(allocation_state(), ModuleKind::kLibrary, library,
                               [&] { return r.cuLibraryUnload(library); });
}
