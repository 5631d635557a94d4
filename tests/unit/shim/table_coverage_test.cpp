// Every ABI of every function libcushare.so hooks is mapped by the
// resolution table to a symbol the shim exports: otherwise a caller asking
// cuGetProcAddress for that (name, version, flags) would get the driver's
// function and bypass the shim. The PFN types are read here straight from
// cudaTypedefs.h (independently of the generator), and the hooked set from
// the built library's exports.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "shim/interpose/proc_table.hpp"

#ifndef CUSHARE_TYPEDEFS_H
#error "CUSHARE_TYPEDEFS_H must name cudaTypedefs.h"
#endif
#ifndef CUSHARE_LIB
#error "CUSHARE_LIB must name libcushare.so"
#endif

namespace cushare::shim {
namespace {

struct Pfn {
  int version;
  std::string variant;  // "", "ptsz", "ptds"
};

std::map<std::string, std::vector<Pfn>> header_pfns() {
  std::ifstream in(CUSHARE_TYPEDEFS_H);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::map<std::string, std::vector<Pfn>> out;
  const std::regex re(R"(\*PFN_(\w+?)_v(\d+)(?:_(ptsz|ptds))?\))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    out[(*it)[1]].push_back({std::stoi((*it)[2]), (*it)[3]});
  }
  return out;
}

TEST(TableCoverage, EveryPfnOfAHookedFunctionResolvesToAShimExport) {
  const auto pfns = header_pfns();
  ASSERT_GT(pfns.size(), 300u) << "could not read " << CUSHARE_TYPEDEFS_H;
  void* lib = dlopen(CUSHARE_LIB, RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto exported = [&](const std::string& sym) {
    void* p = dlsym(lib, sym.c_str());
    Dl_info info{};
    return p && dladdr(p, &info) &&
           std::string(info.dli_fname).find("libcushare") != std::string::npos;
  };
  // Base names with at least one exported ABI are the hooked functions.
  std::set<std::string> hooked;
  for (const auto& e : proc_table())
    if (exported(e.symbol)) hooked.insert(e.base);
  ASSERT_GT(hooked.size(), 30u);
  int checked = 0;
  for (const auto& base : hooked) {
    auto it = pfns.find(base);
    ASSERT_NE(it, pfns.end()) << base << " has no PFN_ type in cudaTypedefs.h";
    for (const auto& pfn : it->second) {
      const std::uint64_t flags =
          pfn.variant.empty() ? 0 : CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
      const char* sym = resolve_proc_symbol(base, pfn.version, flags);
      ASSERT_NE(sym, nullptr) << "PFN_" << base << "_v" << pfn.version << "_" << pfn.variant
                              << " is not mapped by the resolution table";
      EXPECT_TRUE(exported(sym)) << "PFN_" << base << "_v" << pfn.version << " " << pfn.variant
                                 << " resolves to " << sym << ", which libcushare.so does not hook";
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}

}  // namespace
}  // namespace cushare::shim
