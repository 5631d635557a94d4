// Whether the CPU's counter may stand in for CLOCK_MONOTONIC in the launch
// gate (docs/scheduler.md, "The clock"), decided from what the kernel says
// about it. Pure: the facts are arguments, read by read_clock_facts().
#pragma once

#include <string>
#include <string_view>

namespace cushare::shim::gate {

struct ClockFacts {
  std::string current;    // clocksource0/current_clocksource
  std::string available;  // clocksource0/available_clocksource
  std::string cpu_flags;  // the first "flags" line of /proc/cpuinfo (x86)
};

enum class CounterArch { kX86_64, kAarch64, kNone };

// The architecture this library was built for.
constexpr CounterArch kCounterArch =
#if defined(__x86_64__)
    CounterArch::kX86_64;
#elif defined(__aarch64__)
    CounterArch::kAarch64;
#else
    CounterArch::kNone;
#endif

// x86-64: the TSC, where the kernel keeps time with it; or in a KVM or
// Hyper-V guest keeping time with the hypervisor's clock (kvm-clock, the
// Hyper-V TSC page: both the TSC, scaled), where the kernel still lists the
// TSC as a clocksource it could switch to and the CPU says it runs at a
// constant rate through frequency changes and idle states (constant_tsc,
// nonstop_tsc). The kernel delists a TSC its watchdog found unstable, and a
// guest given a TSC that is not invariant marks it unstable from boot; the
// hypervisor keeps a guest's TSCs in step. Not on bare metal: there a
// kernel that does not keep time with the TSC has found something wrong
// with it.
// aarch64: the generic timer's virtual count, where the kernel keeps time
// with it (arch_sys_counter, its only clocksource on most systems).
bool counter_trusted(CounterArch arch, const ClockFacts& facts) noexcept;

// The value of the first "flags" line of /proc/cpuinfo's text.
std::string cpu_flags_of(std::string_view cpuinfo);

// Reads the facts (empty strings where a file cannot be read).
ClockFacts read_clock_facts();

}  // namespace cushare::shim::gate
