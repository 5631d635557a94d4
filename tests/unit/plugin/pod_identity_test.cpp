#include <gtest/gtest.h>

#include "plugin/core/allocation_plan.hpp"
#include "plugin/core/pod_identity_sync.hpp"
#include "shm/pod_identity.hpp"

namespace cushare::plugin {
namespace {

TEST(PodIdentity, RoundTripsAndRefusesAnythingElse) {
  const shm::PodIdentity who{"trainer-0", "ml", "main"};
  EXPECT_EQ(shm::parse_pod_identity(shm::format_pod_identity(who)), who);
  for (const char* bad : {"", "{", "[]", R"({"pod": "p", "namespace": "n"})",
                          R"({"pod": "p", "namespace": "n", "container": 3})",
                          R"({"pod": "", "namespace": "n", "container": "c"})"}) {
    EXPECT_FALSE(shm::parse_pod_identity(bad)) << bad;
  }
  const std::string huge(300, 'x');
  EXPECT_FALSE(shm::parse_pod_identity(shm::format_pod_identity({huge, "n", "c"})));
}

TEST(PodIdentity, EachContainerNamesItsAllocation) {
  const std::vector<ContainerDevices> listed = {{"a", "ns", "c0", {"G::0", "G::1"}},
                                                {"b", "ns", "c1", {"G::2"}}};
  const auto ids = identities_by_allocation(listed);
  ASSERT_EQ(ids.size(), 2u);
  const std::vector<std::string> a_ids = {"G::1", "G::0"};  // order does not matter
  EXPECT_EQ(ids.at(allocation_id_for(a_ids)), (shm::PodIdentity{"a", "ns", "c0"}));
}

TEST(PodIdentity, SyncWritesWhatChangedAndRemovesWhatIsGone) {
  const std::map<std::string, shm::PodIdentity> wanted = {{"a1", {"p", "n", "c"}},
                                                          {"a2", {"q", "n", "c"}}};
  const std::map<std::string, std::string> on_disk = {
      {"a1", shm::format_pod_identity({"p", "n", "c"})},
      {"a2", shm::format_pod_identity({"old", "n", "c"})},
      {"a3", shm::format_pod_identity({"gone", "n", "c"})}};
  const auto sync = plan_identity_sync(on_disk, wanted);
  EXPECT_EQ(sync.removals, std::vector<std::string>{"a3"});
  ASSERT_EQ(sync.writes.size(), 1u);
  EXPECT_EQ(sync.writes.at("a2"), shm::format_pod_identity({"q", "n", "c"}));
}

}  // namespace
}  // namespace cushare::plugin
