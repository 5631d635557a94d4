// Which counters the launch gate trusts, from what the kernel says about them.
#include "shim/gate/clock_source.hpp"

#include <gtest/gtest.h>

namespace cushare::shim::gate {
namespace {

constexpr const char* kInvariant = " fpu tsc rdtscp constant_tsc nonstop_tsc cpuid\n";

TEST(ClockSource, TheTscIsTrustedWhereTheKernelKeepsTimeWithIt) {
  EXPECT_TRUE(counter_trusted(CounterArch::kX86_64, {.current = "tsc\n"}));
  EXPECT_TRUE(counter_trusted(CounterArch::kX86_64,
                              {.current = "tsc\n", .available = "tsc hpet acpi_pm \n"}));
}

TEST(ClockSource, AnInvariantTscTheKernelStillListsIsTrustedUnderAHypervisorsClock) {
  EXPECT_TRUE(counter_trusted(CounterArch::kX86_64, {.current = "kvm-clock\n",
                                                     .available = "kvm-clock tsc acpi_pm \n",
                                                     .cpu_flags = kInvariant}));
  EXPECT_TRUE(counter_trusted(CounterArch::kX86_64,
                              {.current = "hyperv_clocksource_tsc_page\n",
                               .available = "hyperv_clocksource_tsc_page tsc acpi_pm \n",
                               .cpu_flags = kInvariant}));
}

TEST(ClockSource, OnBareMetalOnlyTheKernelsOwnChoiceCounts) {
  // Listed and invariant, but the kernel keeps time with something else:
  // it has seen something wrong with the TSC (or was told to).
  EXPECT_FALSE(counter_trusted(
      CounterArch::kX86_64,
      {.current = "hpet\n", .available = "tsc hpet acpi_pm \n", .cpu_flags = kInvariant}));
}

TEST(ClockSource, ATscTheKernelDelistedOrThatIsNotInvariantIsNot) {
  // The watchdog found it unstable (or a guest marked it so at boot).
  EXPECT_FALSE(counter_trusted(
      CounterArch::kX86_64,
      {.current = "hpet\n", .available = "hpet acpi_pm \n", .cpu_flags = kInvariant}));
  // Listed, but it stops in idle states or follows the CPU's frequency.
  EXPECT_FALSE(counter_trusted(CounterArch::kX86_64, {.current = "kvm-clock\n",
                                                      .available = "kvm-clock tsc \n",
                                                      .cpu_flags = " fpu tsc constant_tsc\n"}));
  EXPECT_FALSE(counter_trusted(CounterArch::kX86_64, {.current = "kvm-clock\n",
                                                      .available = "kvm-clock tsc \n",
                                                      .cpu_flags = " fpu tsc nonstop_tsc\n"}));
  // Words, not substrings: "tsc-early" is not "tsc".
  EXPECT_FALSE(counter_trusted(CounterArch::kX86_64, {.current = "tsc-early\n"}));
  EXPECT_FALSE(counter_trusted(CounterArch::kX86_64,
                               {.current = "hyperv_clocksource_tsc_page\n",
                                .available = "hyperv_clocksource_tsc_page tsc-early \n",
                                .cpu_flags = kInvariant}));
  // Nothing readable (no sysfs in the container): the clock.
  EXPECT_FALSE(counter_trusted(CounterArch::kX86_64, {}));
}

TEST(ClockSource, TheGenericTimerIsTrustedWhereTheKernelKeepsTimeWithIt) {
  EXPECT_TRUE(counter_trusted(CounterArch::kAarch64, {.current = "arch_sys_counter\n"}));
  EXPECT_FALSE(counter_trusted(CounterArch::kAarch64, {.current = "jiffies\n"}));
  EXPECT_FALSE(
      counter_trusted(CounterArch::kAarch64, {.current = "tsc\n", .cpu_flags = kInvariant}));
  EXPECT_FALSE(counter_trusted(CounterArch::kNone, {.current = "tsc\n"}));
}

TEST(ClockSource, TheFirstFlagsLineOfCpuinfo) {
  EXPECT_EQ(
      cpu_flags_of("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu tsc nonstop_tsc\n"
                   "bugs\t\t: sysret_ss_attrs\nprocessor\t: 1\nflags\t\t: other\n"),
      " fpu tsc nonstop_tsc");
  EXPECT_EQ(cpu_flags_of("processor\t: 0\n"), "");
  EXPECT_EQ(cpu_flags_of("flags : last line without newline"), " last line without newline");
}

}  // namespace
}  // namespace cushare::shim::gate
