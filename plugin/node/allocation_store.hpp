// Writes an AllocationPlan to the node: the allocation folder, its `limits`
// region (quotas from the plan) and an empty `usage` region, and the shared
// generated ld.so.preload. Idempotent: a repeated Allocate of the same IDs
// finds the folder and rewrites the same quotas through the seqlock, without
// disturbing processes that already map the regions.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "plugin/core/allocation_plan.hpp"

namespace cushare::plugin {

class AllocationStore {
 public:
  explicit AllocationStore(std::string run_dir) : run_dir_(std::move(run_dir)) {}

  // Throws std::runtime_error (shm::RegionError or filesystem errors) naming the path.
  void write(const AllocationPlan& plan);

  // Removes an allocation folder unless write() touched it within `grace`
  // (checked under the same lock write() takes, so the two never race).
  bool remove_unless_recent(const std::string& alloc_id, std::chrono::seconds grace);

  const std::string& run_dir() const { return run_dir_; }

 private:
  void write_limits(const AllocationPlan& plan);
  void write_usage(const AllocationPlan& plan);
  static void write_preload(const AllocationPlan& plan);

  std::string run_dir_;
  std::mutex mu_;
  std::map<std::string, std::chrono::steady_clock::time_point> last_write_;
};

}  // namespace cushare::plugin
