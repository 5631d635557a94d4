#include "scheduler/spare_cpu.hpp"

#include <charconv>

namespace cushare::sched {
namespace {

// The numbers after the first word of `line`.
template <std::size_t N>
unsigned numbers(std::string_view line, std::uint64_t (&out)[N]) {
  unsigned n = 0;
  std::size_t i = line.find(' ');
  while (i != std::string_view::npos && n < N) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size()) break;
    const auto [end, ec] = std::from_chars(line.data() + i, line.data() + line.size(), out[n]);
    if (ec != std::errc{}) break;
    ++n;
    i = static_cast<std::size_t>(end - line.data());
  }
  return n;
}

}  // namespace

std::optional<CpuTimes> parse_proc_stat(std::string_view text) {
  std::optional<CpuTimes> out;
  unsigned cpus = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.starts_with("cpu ")) {
      // user nice system idle iowait irq softirq steal (guest time is in user)
      std::uint64_t f[8] = {};
      if (numbers(line, f) < 5) return std::nullopt;
      CpuTimes t;
      for (const std::uint64_t v : f) t.total += v;
      t.idle = f[3] + f[4];
      out = t;
    } else if (line.starts_with("cpu") && line.size() > 3 && line[3] >= '0' && line[3] <= '9') {
      ++cpus;
    }
  }
  if (!out || cpus == 0) return std::nullopt;
  out->cpus = cpus;
  return out;
}

void SpareCpu::observe(const CpuTimes& now) {
  if (last_ && now.total >= last_->total && now.total - last_->total < kMinTicksPerCpu * now.cpus)
    return;
  if (last_ && now.total > last_->total && now.idle >= last_->idle) {
    const double idle = static_cast<double>(now.idle - last_->idle);
    const double total = static_cast<double>(now.total - last_->total);
    spare_ = idle / total * now.cpus;
  }
  last_ = now;
}

}  // namespace cushare::sched
