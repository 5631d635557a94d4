// The host's idle CPUs from /proc/stat (pure parts).
#include "scheduler/spare_cpu.hpp"

#include <gtest/gtest.h>

#include <string>

namespace cushare::sched {
namespace {

std::string stat_text(std::uint64_t user, std::uint64_t idle, std::uint64_t iowait,
                      std::uint64_t steal, unsigned cpus) {
  std::string s = "cpu  " + std::to_string(user) + " 0 0 " + std::to_string(idle) + " " +
                  std::to_string(iowait) + " 0 0 " + std::to_string(steal) + " 0 0\n";
  for (unsigned i = 0; i < cpus; ++i) s += "cpu" + std::to_string(i) + " 1 0 0 1 0 0 0 0 0 0\n";
  return s + "intr 12345 0 0\nctxt 99\n";
}

TEST(ProcStat, TheAggregateLineAndTheNumberOfCpus) {
  const auto t = parse_proc_stat(stat_text(100, 300, 20, 5, 2));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->idle, 320u);
  EXPECT_EQ(t->total, 425u);
  EXPECT_EQ(t->cpus, 2u);
  EXPECT_FALSE(parse_proc_stat(""));
  EXPECT_FALSE(parse_proc_stat("cpu  1 2\ncpu0 1 2 3 4 5\n"));  // too few fields
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 3 4 5 6 7 8\n"));      // no per-CPU lines
  EXPECT_FALSE(parse_proc_stat("cpu  x y z w v\ncpu0 1 1 1 1 1\n"));
}

TEST(SpareCpu, IdleCpusBetweenTwoReadingsDecide) {
  SpareCpu s;
  EXPECT_FALSE(s.enough());  // nothing known yet
  s.observe(*parse_proc_stat(stat_text(0, 0, 0, 0, 2)));
  EXPECT_FALSE(s.enough());
  // Two CPUs, 200 ticks: one busy all along, the other idle: one to spare.
  s.observe(*parse_proc_stat(stat_text(100, 100, 0, 0, 2)));
  EXPECT_DOUBLE_EQ(s.cpus(), 1.0);
  EXPECT_TRUE(s.enough());
  // A CPU-bound process per CPU: none idle (stolen time is not idle).
  s.observe(*parse_proc_stat(stat_text(280, 110, 0, 10, 2)));
  EXPECT_NEAR(s.cpus(), 0.1, 1e-9);
  EXPECT_FALSE(s.enough());
  // A reading too soon after the last (an early housekeeping pass) is skipped.
  s.observe(*parse_proc_stat(stat_text(281, 119, 0, 10, 2)));
  EXPECT_NEAR(s.cpus(), 0.1, 1e-9);
  // Counters that went backwards (hotplug) leave the figure as it was.
  s.observe(*parse_proc_stat(stat_text(10, 10, 0, 0, 2)));
  EXPECT_NEAR(s.cpus(), 0.1, 1e-9);
}

}  // namespace
}  // namespace cushare::sched
