// Finding a managed allocation in the mount table (pure parsing).
#include "shim/accounting/managed_allocation.hpp"

#include <gtest/gtest.h>

namespace cushare::shim {
namespace {

// What a container of the device plugin's layout shows (Docker, /var/run -> /run).
constexpr const char* kContainer =
    "1200 1100 0:300 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/x\n"
    "1201 1200 0:310 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
    "1210 1200 0:25 /cushare/alloc/3f9a0c/ /run/cushare rw,nosuid,nodev - tmpfs tmpfs rw\n"
    "1211 1210 0:25 /cushare/alloc/3f9a0c/limits /run/cushare/limits ro,nosuid,nodev,relatime "
    "- tmpfs tmpfs rw\n"
    "1212 1200 0:25 /cushare/ld.so.preload /etc/ld.so.preload ro,relatime - tmpfs tmpfs rw\n";

TEST(ManagedMount, FindsTheReadOnlyLimitsMountOfAnAllocationFolder) {
  const auto m = find_managed_mount(kContainer);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->mount_id, 1211u);
  EXPECT_EQ(m->dev_major, 0u);
  EXPECT_EQ(m->dev_minor, 25u);
  EXPECT_EQ(m->alloc_id, "3f9a0c");
  EXPECT_EQ(m->limits, "/run/cushare/limits");
  EXPECT_EQ(m->run_dir, "/run/cushare");
}

TEST(ManagedMount, NothingWithoutSuchAMount) {
  EXPECT_FALSE(find_managed_mount(""));
  EXPECT_FALSE(find_managed_mount("22 27 0:21 / /proc rw,relatime - proc proc rw\n"));
  // Read-write: a tenant-made file, not the node's.
  EXPECT_FALSE(find_managed_mount(
      "11 1 0:25 /cushare/alloc/a/limits /run/cushare/limits rw,relatime - tmpfs tmpfs rw\n"));
  // Read-only, but not an allocation's limits file.
  EXPECT_FALSE(find_managed_mount(
      "11 1 0:25 /etc/limits /run/cushare/limits ro,relatime - tmpfs tmpfs rw\n"));
  EXPECT_FALSE(find_managed_mount(
      "11 1 0:25 /cushare/alloc/a/limits /run/cushare/other ro,relatime - tmpfs tmpfs rw\n"));
  EXPECT_FALSE(
      find_managed_mount("11 1 0:25 /alloc//limits /x/limits ro,relatime - tmpfs tmpfs rw\n"));
  // Damaged lines are skipped, not trusted.
  EXPECT_FALSE(find_managed_mount("x y z /cushare/alloc/a/limits /r/limits ro - t t rw\n"));
}

TEST(ManagedMount, EscapedPathsAndTheTopmostOfSeveral) {
  const auto m = find_managed_mount(
      "10 1 0:25 /srv/run/alloc/a/limits /var/run/cushare/limits ro - tmpfs tmpfs rw\n"
      "11 1 0:26 /my\\040node/alloc/b\\040c/limits /opt/my\\040dir/limits ro,noatime - ext4 "
      "/dev/sda rw\n");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->alloc_id, "b c");
  EXPECT_EQ(m->run_dir, "/opt/my dir");
  EXPECT_EQ(m->mount_id, 11u);
}

}  // namespace
}  // namespace cushare::shim
