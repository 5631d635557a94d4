// Demand of the launch gate: which processes have a thread waiting at the gate
// for a GPU (for a lease, or for its queued work to drain). The daemon reads
// usage.gpus[g].demand, so it counts processes, each through a bit of its
// slot (shm::mark_demand): a process killed while a thread waits leaves no
// demand behind once its slot is reclaimed. Threads of one process are
// counted here; the first one in sets the mark, the last one out clears it.
#pragma once

#include "shm/layout.hpp"

namespace cushare::shim::gate {

void demand_enter(unsigned gpu, shm::GpuUsage& usage) noexcept;
void demand_leave(unsigned gpu, shm::GpuUsage& usage) noexcept;
// In a fork child: no thread of it waits anywhere, and its slot is new.
void reset_demand_after_fork() noexcept;

// One thread's share, counted at most once and given back on scope exit.
class DemandCount {
 public:
  DemandCount(unsigned gpu, shm::GpuUsage& usage) noexcept : gpu_(gpu), usage_(usage) {}
  DemandCount(const DemandCount&) = delete;
  DemandCount& operator=(const DemandCount&) = delete;
  ~DemandCount() { release(); }

  void count() noexcept {
    if (counted_) return;
    counted_ = true;
    demand_enter(gpu_, usage_);
  }
  void release() noexcept {
    if (!counted_) return;
    counted_ = false;
    demand_leave(gpu_, usage_);
  }

 private:
  unsigned gpu_;
  shm::GpuUsage& usage_;
  bool counted_ = false;
};

}  // namespace cushare::shim::gate
