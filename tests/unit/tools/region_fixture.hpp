// Writes allocation folders with chosen region contents for the tests, so
// every figure cusharectl shows is known in advance.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "shm/layout.hpp"

namespace cushare::tools::testing {

struct RegionPair {
  std::unique_ptr<shm::LimitsRegion> limits;
  std::unique_ptr<shm::UsageRegion> usage;
};

// Zeroed regions with valid headers for allocation `id`.
RegionPair make_regions(const std::string& id, std::uint64_t created_unix_ns, std::uint32_t flags);

// Sets GPU entry `i` (and bumps gpu_count in both regions).
void set_gpu(RegionPair& regions, std::uint32_t i, const std::string& uuid,
             std::uint64_t memory_limit, std::uint32_t compute_pct, std::uint32_t weight,
             shm::ComputeMode mode);

// Claims slot `s` as active for `pid` with per-GPU bytes/overhead on GPU `gpu`.
void add_process(RegionPair& regions, std::uint32_t s, std::uint32_t pid, std::uint32_t host_pid,
                 std::uint32_t gpu, std::uint64_t bytes, std::uint64_t overhead,
                 std::uint64_t heartbeat_ns);

// Writes `folder/limits` (and `folder/usage` unless `with_usage` is false).
void write_regions(const RegionPair& regions, const std::filesystem::path& folder,
                   bool with_usage = true);

// A fresh temp folder removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::string read_file(const std::filesystem::path& path);

}  // namespace cushare::tools::testing
