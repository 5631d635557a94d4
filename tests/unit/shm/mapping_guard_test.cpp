// The mapping guard: a region file truncated under a node process's mapping
// (a tenant may) must not kill that process. Each case runs in a fork child,
// so the process-wide SIGBUS handler never leaks into the other suites.
#include "shm/mapping_guard.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <filesystem>

#include "shm/region_file.hpp"
#include "test_util.hpp"

namespace cushare::shm {
namespace {

using test::TempDir;

// Reads a field on the region's last page, as the daemon's slot scans do.
std::uint32_t touch_last_slot(const UsageMapping& m) {
  return m.region().slots[kMaxSlots - 1].pid.load(std::memory_order_relaxed);
}

TEST(ShmMappingGuard, TruncatedRegionIsDamagedNotFatal) {
  TempDir dir;
  const auto path = dir / "usage";
  { UsageMapping::create(path, {"a"}); }
  const pid_t child = test::fork_child([&] {
    install_mapping_guard();
    auto m = UsageMapping::open(path, Access::kReadWrite);
    if (m.damaged()) return 10;
    if (touch_last_slot(m) != 0) return 11;
    std::filesystem::resize_file(path, 0);   // what a tenant may do to its usage file
    if (touch_last_slot(m) != 0) return 12;  // survives: a zero page
    m.mutable_region().slots[kMaxSlots - 1].pid.store(7, std::memory_order_relaxed);
    if (!m.damaged()) return 13;
    // A mapping of an intact file stays undamaged, and dropping the damaged
    // one frees its guard slot.
    auto other_path = dir / "other";
    auto other = UsageMapping::create(other_path, {"b"});
    if (other.damaged()) return 14;
    m = std::move(other);
    if (m.damaged()) return 15;
    return 0;
  });
  EXPECT_EQ(test::wait_child(child), 0);
}

TEST(ShmMappingGuard, WithoutTheGuardATruncatedMappingStillFaults) {
  TempDir dir;
  const auto path = dir / "usage";
  { UsageMapping::create(path, {"a"}); }
  const pid_t child = test::fork_child([&] {
    auto m = UsageMapping::open(path, Access::kReadOnly);
    std::filesystem::resize_file(path, 0);
    (void)touch_last_slot(m);  // SIGBUS (under ASan: its report, then abort)
    return 0;
  });
  EXPECT_NE(test::wait_child(child), 0);
}

TEST(ShmMappingGuard, FaultsOutsideRegionsAreNotSwallowed) {
  TempDir dir;
  const auto path = dir / "plain";
  { UsageMapping::create(path, {"a"}); }
  const pid_t child = test::fork_child([&] {
    install_mapping_guard();
    // A mapping that is not a region: the guard must leave its fault alone.
    boost::interprocess::file_mapping fm(path.c_str(), boost::interprocess::read_only);
    boost::interprocess::mapped_region r(fm, boost::interprocess::read_only);
    std::filesystem::resize_file(path, 0);
    volatile const char* p = static_cast<const char*>(r.get_address());
    (void)p[r.get_size() - 1];
    return 0;
  });
  EXPECT_NE(test::wait_child(child), 0);
}

}  // namespace
}  // namespace cushare::shm
