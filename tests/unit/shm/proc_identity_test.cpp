// /proc/<pid>/stat parsing (pure) and the identity readers.
#include "shm/proc_identity.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.hpp"

namespace cushare::shm {
namespace {

std::string stat_line(const std::string& comm, char state, unsigned long long start) {
  // Fields 1..22 then a few more, as the kernel prints them.
  std::string s =
      "4242 (" + comm + ") " + state + " 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 ";
  return s + std::to_string(start) + " 12345678 321 18446744073709551615 1 1 0 0 0\n";
}

TEST(ShmProcIdentity, ParsesStateAndStartTime) {
  auto r = parse_proc_stat(stat_line("python3", 'S', 987654321ull));
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->state, 'S');
  EXPECT_EQ(r->start_time, 987654321ull);
}

TEST(ShmProcIdentity, CommWithSpacesAndParentheses) {
  for (const std::string comm : {"a b", "x) (y", "))", "(", "evil) R 1 2 3", ""}) {
    auto r = parse_proc_stat(stat_line(comm, 'Z', 55));
    ASSERT_TRUE(r.has_value()) << comm << ": " << r.error();
    EXPECT_EQ(r->state, 'Z') << comm;
    EXPECT_EQ(r->start_time, 55u) << comm;
  }
}

TEST(ShmProcIdentity, RejectsMalformedLines) {
  EXPECT_FALSE(parse_proc_stat("").has_value());
  EXPECT_FALSE(parse_proc_stat("1 comm S 1 2 3").has_value());
  EXPECT_FALSE(parse_proc_stat("1 (comm) S 1 2 3").has_value());  // too few fields
  EXPECT_FALSE(
      parse_proc_stat("1 (comm) SS 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19").has_value());
  EXPECT_FALSE(
      parse_proc_stat("4242 (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 x 5\n")
          .has_value());
  EXPECT_FALSE(
      parse_proc_stat("4242 (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 -7 5\n")
          .has_value());
  EXPECT_FALSE(parse_proc_stat("1 )comm( S").has_value());
}

TEST(ShmProcIdentity, SelfIdentityMatchesProc) {
  auto id = self_identity();
  ASSERT_TRUE(id.has_value()) << id.error();
  EXPECT_EQ(id->pid, static_cast<std::uint32_t>(getpid()));
  struct stat sb {};
  ASSERT_EQ(stat("/proc/self/ns/pid", &sb), 0);
  EXPECT_EQ(id->pidns_inode, sb.st_ino);
  EXPECT_GT(id->start_time, 0u);
  auto st = read_proc_stat(getpid());
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->start_time, id->start_time);
  EXPECT_EQ(read_pidns_inode(getpid()), id->pidns_inode);
}

TEST(ShmProcIdentity, ChildBecomesZombieThenGone) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t child = test::fork_child([&] {
    close(pipefd[1]);
    char c;
    (void)!read(pipefd[0], &c, 1);
    return 0;
  });
  auto st = read_proc_stat(child);
  ASSERT_TRUE(st.has_value());
  EXPECT_NE(st->state, 'Z');
  close(pipefd[1]);  // child reads EOF and exits
  // Wait (without reaping) until the child is a zombie.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, child, &info, WEXITED | WNOWAIT), 0);
  st = read_proc_stat(child);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->state, 'Z');
  test::wait_child(child);
  close(pipefd[0]);
  EXPECT_FALSE(read_proc_stat(child).has_value());
  EXPECT_FALSE(self_identity("/nonexistent").has_value());
}

}  // namespace
}  // namespace cushare::shm
