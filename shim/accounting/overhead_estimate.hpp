// What a context creation or a module load took on the device, from two
// samples taken around it (context_overhead.hpp takes them). Pure.
#pragma once

#include <cstdint>

namespace cushare::shim {

struct MemorySample {
  bool process_known = false;  // NVML listed this PID on the device
  std::uint64_t process_used = 0;
  bool device_known = false;
  std::uint64_t device_free = 0;
  bool nvml = false;  // NVML answered at all
  // What this process had charged on the device's quota entry when sampled:
  // other threads allocate and free while a creation is measured, and the
  // NVML figures move with them.
  bool tracked_known = false;
  std::uint64_t tracked = 0;
  // What the process's memory pools and graph memory pool reserve on the
  // device: a synchronisation in another thread gives pool memory back to
  // the device without a memory call, so measurements subtract how this
  // moved. Read on both sides of the NVML figures, which are retaken when
  // it moved in between.
  bool pools_known = false;
  std::uint64_t pools = 0;
};

// Pure: the overhead a context created between `before` and `after` cost,
// less what the process's own charges and its pools' reservations moved by
// meanwhile (when both samples know them); false when it cannot be told.
bool estimate_overhead(const MemorySample& before, const MemorySample& after,
                       std::uint64_t& overhead) noexcept;

}  // namespace cushare::shim
