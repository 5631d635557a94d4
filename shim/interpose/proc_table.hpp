// The cuGetProcAddress resolution table: every ABI of every Driver API entry
// point, generated at build time from the installed cudaTypedefs.h by
// shim/interpose/gen_proc_table.py, and the pure lookup the resolver hooks use.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace cushare::shim {

enum class ProcVariant : std::uint8_t { kDefault, kPtsz, kPtds };

struct ProcEntry {
  const char* base;  // name as passed to cuGetProcAddress ("cuMemAlloc")
  int version;       // ABI version from PFN_<base>_v<version>
  ProcVariant variant;
  const char* symbol;  // exported symbol implementing that ABI ("cuMemAlloc_v2")
};

// All entries, sorted by base name, then variant, then version.
std::span<const ProcEntry> proc_table() noexcept;

// The exported symbol the driver returns for cuGetProcAddress(base, cuda_version,
// flags): the newest ABI with version <= cuda_version; with
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM in flags the newest _ptsz/_ptds
// ABI <= cuda_version if there is one. nullptr when the table has no ABI of
// `base` at or below cuda_version (or does not know `base`).
const char* resolve_proc_symbol(std::string_view base, int cuda_version,
                                std::uint64_t flags) noexcept;

}  // namespace cushare::shim
