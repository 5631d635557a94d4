#pragma once
// Small helpers shared by the Driver-API samples: error checks, JSON-safe
// error names and byte-quantity parsing. The samples link only libcuda.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace samples {

inline std::string error_name(CUresult r) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr)
    return "CUresult(" + std::to_string(r) + ")";
  return name;
}

// Exits with a message on stderr when a setup call fails.
inline void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  std::fprintf(stderr, "%s failed: %s\n", what, error_name(r).c_str());
  std::exit(1);
}

// "256Mi", "1Gi", "4096", "1.5G".
inline std::optional<uint64_t> parse_bytes(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || value < 0) return std::nullopt;
  const std::string suffix(end);
  double mult = 0;
  if (suffix.empty())
    mult = 1;
  else if (suffix == "Ki")
    mult = 1024.0;
  else if (suffix == "Mi")
    mult = 1048576.0;
  else if (suffix == "Gi")
    mult = 1073741824.0;
  else if (suffix == "Ti")
    mult = 1099511627776.0;
  else if (suffix == "k")
    mult = 1e3;
  else if (suffix == "M")
    mult = 1e6;
  else if (suffix == "G")
    mult = 1e9;
  else if (suffix == "T")
    mult = 1e12;
  else
    return std::nullopt;
  return static_cast<uint64_t>(value * mult);
}

}  // namespace samples
