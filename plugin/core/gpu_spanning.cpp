#include "plugin/core/gpu_spanning.hpp"

#include <fmt/format.h>

#include "plugin/core/allocation_plan.hpp"

namespace cushare::plugin {

void check_gpu_spanning(const std::map<std::string, unsigned>& units_by_gpu, unsigned units_per_gpu,
                        GpuSpanning rule) {
  if (units_by_gpu.size() <= 1 || rule == GpuSpanning::kAny) return;
  unsigned total = 0;
  bool all_whole = true;
  std::string parts;
  for (const auto& [uuid, units] : units_by_gpu) {
    total += units;
    all_whole = all_whole && units == units_per_gpu;
    parts += fmt::format("{}{} x{}", parts.empty() ? "" : ", ", uuid, units);
  }
  if (rule == GpuSpanning::kWhole && all_whole) return;
  const std::string why =
      total <= units_per_gpu
          ? fmt::format("{} units fit on one GPU ({} units each), but no GPU had {} free units",
                        total, units_per_gpu, total)
          : fmt::format("{} units are more than one GPU holds ({} units each)", total,
                        units_per_gpu);
  const std::string allowed =
      rule == GpuSpanning::kWhole
          ? fmt::format("gpuSpanning is 'whole': only whole GPUs ({} units each) may be combined",
                        units_per_gpu)
          : std::string("gpuSpanning is 'none': an allocation stays on one GPU");
  throw AllocationError(fmt::format(
      "request of {} units would span {} GPUs ({}): {}; {} (set gpuSpanning to 'any' in the "
      "plugin config to allow fractions of several GPUs)",
      total, units_by_gpu.size(), parts, why, allowed));
}

}  // namespace cushare::plugin
