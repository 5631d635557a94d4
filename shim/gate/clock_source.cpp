#include "shim/gate/clock_source.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>

namespace cushare::shim::gate {
namespace {

// Whether `word` is one of the space- or newline-separated words of `list`.
bool has_word(std::string_view list, std::string_view word) noexcept {
  std::size_t at = 0;
  while (at < list.size()) {
    const std::size_t end = list.find_first_of(" \t\n", at);
    const std::size_t stop = end == std::string_view::npos ? list.size() : end;
    if (list.substr(at, stop - at) == word) return true;
    at = stop + 1;
  }
  return false;
}

// The first `limit` bytes of a file (procfs and sysfs files are read whole
// in one or a few reads); empty when it cannot be opened.
std::string read_head(const char* path, std::size_t limit) {
  std::string out;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  std::array<char, 4096> buf{};
  while (out.size() < limit) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n <= 0) break;
    out.append(buf.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (out.size() > limit) out.resize(limit);
  return out;
}

}  // namespace

std::string cpu_flags_of(std::string_view cpuinfo) {
  std::size_t at = 0;
  while (at < cpuinfo.size()) {
    const std::size_t end = cpuinfo.find('\n', at);
    const std::string_view line =
        cpuinfo.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    if (line.starts_with("flags")) {
      const std::size_t colon = line.find(':');
      return colon == std::string_view::npos ? std::string() : std::string(line.substr(colon + 1));
    }
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  return {};
}

bool counter_trusted(CounterArch arch, const ClockFacts& facts) noexcept {
  switch (arch) {
    case CounterArch::kX86_64:
      if (has_word(facts.current, "tsc")) return true;
      return (has_word(facts.current, "kvm-clock") ||
              has_word(facts.current, "hyperv_clocksource_tsc_page")) &&
             has_word(facts.available, "tsc") && has_word(facts.cpu_flags, "constant_tsc") &&
             has_word(facts.cpu_flags, "nonstop_tsc");
    case CounterArch::kAarch64:
      return has_word(facts.current, "arch_sys_counter");
    case CounterArch::kNone:
      return false;
  }
  return false;
}

ClockFacts read_clock_facts() {
  constexpr const char* kDir = "/sys/devices/system/clocksource/clocksource0/";
  // The flags line comes within the first processor's block (a few KiB).
  return {.current = read_head((std::string(kDir) + "current_clocksource").c_str(), 256),
          .available = read_head((std::string(kDir) + "available_clocksource").c_str(), 1024),
          .cpu_flags = kCounterArch == CounterArch::kX86_64
                           ? cpu_flags_of(read_head("/proc/cpuinfo", 16384))
                           : std::string()};
}

}  // namespace cushare::shim::gate
