// libFuzzer target: the pure parsers of shm/ (quantities, percents, HAMi
// units, /proc stat lines) and the env -> quota spec mapping. Besides "no
// crash, no UB" it checks the parsers' documented contracts on every input.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shm/proc_identity.hpp"
#include "shm/quantity.hpp"
#include "shm/quota_spec.hpp"

using namespace cushare::shm;

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("contract violated: %s\n", what);
    std::abort();
  }
}

bool has_space(std::string_view s) {
  for (char c : s)
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return true;
  return false;
}

void fuzz_env(std::string_view text) {
  // Lines "NAME=VALUE" form the environment; the GPUs are fixed.
  std::map<std::string, std::string> vars;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(pos, nl - pos);
    const std::size_t eq = line.find('=');
    if (eq != std::string_view::npos)
      vars[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    pos = nl + 1;
  }
  const EnvLookup env = [&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  const std::vector<VisibleGpu> gpus = {{0, "GPU-0000", 80ull << 30}, {1, "GPU-1111", 0}};
  auto r = quota_spec_from_env(env, gpus);
  if (!r) {
    check(!r.error().empty(), "quota spec error message is empty");
    return;
  }
  for (const auto& g : *r) {
    check(g.memory_limit_bytes > 0, "memory limit 0");
    check(g.compute_limit_pct >= 1 && g.compute_limit_pct <= 100, "compute limit range");
    check(g.weight >= 1 && g.weight <= kMaxWeight, "weight range");
    check(g.memory_source.empty() == (g.memory_limit_bytes == kUnlimited), "memory source");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      auto r = parse_k8s_quantity(text);
      if (r) {
        check(*r != kUnlimited, "quantity == kUnlimited");
        check(!text.empty() && !has_space(text) && text[0] != '-', "accepted malformed quantity");
      } else {
        check(!r.error().empty(), "quantity error empty");
      }
      break;
    }
    case 1: {
      auto r = parse_percent_milli(text);
      if (r) check(*r >= 1 && *r <= 100000, "percent range");
      auto m = parse_memory_amount(text);
      if (m) {
        const auto b = resolve_memory_amount(*m, 80ull << 30);
        if (m->kind == MemoryAmount::Kind::kPercentOfCard)
          check(b <= (80ull << 30), "percent > card");
      }
      break;
    }
    case 2: {
      auto r = parse_hami_memory(text);
      if (r) check(*r != kUnlimited && !text.empty(), "hami range");
      break;
    }
    case 3: {
      auto r = parse_compute_percent(text);
      if (r) check(*r >= 1 && *r <= 100, "compute range");
      break;
    }
    case 4: {
      auto r = parse_proc_stat(text);
      if (r) check(text.rfind(')') != std::string_view::npos, "stat without comm");
      break;
    }
    case 5:
      fuzz_env(text);
      break;
  }
  return 0;
}
