// Tables for people: the status overview (grouped per GPU), the detail of one
// allocation (inspect) and the live view (top, bars of entitlement vs.
// achieved share). Every line fits `width` columns (80 by default).
#pragma once

#include <cstddef>
#include <string>

#include "node/status_model.hpp"

namespace cushare::tools {

inline constexpr std::size_t kDefaultWidth = 80;

std::string render_status(const Status& status, std::size_t width = kDefaultWidth);

std::string render_allocation(const Allocation& alloc, const std::vector<GpuInfo>& gpus,
                              const DaemonState& daemon, std::size_t width = kDefaultWidth);

// One frame of `top`: a title line, then per GPU one line per allocation with
// a bar: '#' up to the achieved share, '|' at the entitlement.
std::string render_top(const Status& status, std::size_t width = kDefaultWidth);

// "[#####|....]" of `width` characters for achieved/target shares in ppm.
std::string share_bar(std::optional<std::uint32_t> achieved_ppm,
                      std::optional<std::uint32_t> target_ppm, std::size_t width);

}  // namespace cushare::tools
