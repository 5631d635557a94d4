// What the plugin knows about the node's GPUs. Filled by NVML discovery at
// start-up and passed by value into the pure allocation code, so that code
// never touches NVML, sysfs or the file system.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cushare::plugin {

inline constexpr int kUnknownNumaNode = -1;

struct GpuInfo {
  int index = 0;     // NVML enumeration index on the host
  std::string uuid;  // "GPU-xxxxxxxx-..."
  std::string name;  // "NVIDIA H100 80GB HBM3"
  std::uint64_t memory_bytes = 0;
  std::string pci_bus_id;  // "00000000:3B:00.0"
  int numa_node = kUnknownNumaNode;
  unsigned minor_number = 0;  // /dev/nvidia<minor>
};

struct Inventory {
  std::vector<GpuInfo> gpus;
  // Control device nodes that exist on the host (e.g. "/dev/nvidiactl"),
  // passed as device specs together with each GPU's own node.
  std::vector<std::string> control_nodes;

  const GpuInfo* find(std::string_view uuid) const {
    for (const auto& g : gpus) {
      if (g.uuid == uuid) return &g;
    }
    return nullptr;
  }
};

}  // namespace cushare::plugin
