// Small GPU inventories shared by the plugin's unit tests.
#pragma once

#include "plugin/core/gpu_inventory.hpp"

namespace cushare::plugin::testing {

inline constexpr std::uint64_t kGi = 1024ULL * 1024 * 1024;
inline const std::string kUuidA = "GPU-aaaaaaaa-0000-0000-0000-000000000001";
inline const std::string kUuidB = "GPU-bbbbbbbb-0000-0000-0000-000000000002";
inline const std::string kUuidC = "GPU-cccccccc-0000-0000-0000-000000000003";
inline const std::string kUuidD = "GPU-dddddddd-0000-0000-0000-000000000004";

inline GpuInfo make_gpu(int index, const std::string& uuid, std::uint64_t mem, int numa) {
  GpuInfo g;
  g.index = index;
  g.uuid = uuid;
  g.name = "Test GPU";
  g.memory_bytes = mem;
  g.pci_bus_id = "00000000:0" + std::to_string(index + 1) + ":00.0";
  g.numa_node = numa;
  g.minor_number = static_cast<unsigned>(index);
  return g;
}

inline Inventory two_gpus() {
  Inventory inv;
  inv.gpus = {make_gpu(0, kUuidA, 80 * kGi, 0), make_gpu(1, kUuidB, 16 * kGi, 0)};
  return inv;
}

inline Inventory four_gpus_two_numa() {
  Inventory inv;
  inv.gpus = {make_gpu(0, kUuidA, 80 * kGi, 0), make_gpu(1, kUuidB, 80 * kGi, 1),
              make_gpu(2, kUuidC, 80 * kGi, 1), make_gpu(3, kUuidD, 80 * kGi, 0)};
  return inv;
}

}  // namespace cushare::plugin::testing
