// Golden tests: regions written by the test -> status model -> table / JSON.
#include <gtest/gtest.h>

#include "golden.hpp"
#include "node/run_dir.hpp"
#include "node/status_json.hpp"
#include "scenario.hpp"
#include "tools/status_render.hpp"

namespace cushare::tools {
namespace {

using testing::expect_golden;
using testing::replace_all;

class StatusGolden : public ::testing::Test {
 protected:
  void SetUp() override { testing::write_scenario_node(run_dir()); }
  std::filesystem::path run_dir() const { return tmp_.path() / "run"; }
  std::string anonymise(std::string text) const {
    replace_all(text, run_dir().string(), "<RUN>");
    return text;
  }
  // Paths are replaced in the model, before rendering, so that the temp
  // folder's length never changes how lines wrap.
  Status status() const {
    Status s = read_status_from_regions(run_dir().string(), testing::scenario_gpus(),
                                        testing::fixed_now());
    anonymise_model(s, run_dir().string(), "<RUN>");
    return s;
  }
  static void anonymise_model(Status& s, const std::string& from, const std::string& to) {
    replace_all(s.run_dir, from, to);
    for (auto& a : s.allocations) replace_all(a.path, from, to);
    for (auto& p : s.problems) {
      replace_all(p.path, from, to);
      replace_all(p.error, from, to);
    }
  }
  Allocation team_a() const {
    Allocation a = read_allocation(run_dir().string(), "team-a", testing::fixed_now());
    replace_all(a.path, run_dir().string(), "<RUN>");
    return a;
  }
  testing::TempDir tmp_;
};

TEST_F(StatusGolden, NodeTable) {
  expect_golden("status_node.txt", render_status(status()));
}

TEST_F(StatusGolden, NodeJson) {
  expect_golden("status_node.json", to_json(status()).dump(2) + "\n");
}

TEST_F(StatusGolden, EveryTableLineFits80Columns) {
  for (const std::string& text :
       {render_status(status()), render_top(status()),
        render_allocation(status().allocations.at(0), testing::scenario_gpus(), status().daemon)}) {
    std::size_t start = 0;
    while (start < text.size()) {
      const std::size_t end = text.find('\n', start);
      EXPECT_LE(end - start, 80u) << text.substr(start, end - start);
      start = end + 1;
    }
  }
}

TEST_F(StatusGolden, InspectTable) {
  expect_golden("inspect_team_a.txt",
                render_allocation(team_a(), testing::scenario_gpus(), status().daemon));
}

TEST_F(StatusGolden, InspectJson) {
  expect_golden("inspect_team_a.json", to_json(team_a()).dump(2) + "\n");
}

TEST_F(StatusGolden, TopFrame) {
  expect_golden("top_node.txt", render_top(status()));
}

TEST_F(StatusGolden, InsideContainerShowsOwnAllocation) {
  const std::string folder = (run_dir() / "alloc" / "team-a").string();
  Status s = read_status_from_regions(folder, {}, testing::fixed_now());
  EXPECT_EQ(s.kind, RunDirKind::kAllocation);
  ASSERT_EQ(s.allocations.size(), 1u);
  EXPECT_EQ(s.allocations[0].id, "team-a");
  anonymise_model(s, folder, "/var/run/cushare");
  expect_golden("status_container.txt", render_status(s));
}

TEST_F(StatusGolden, WithoutDaemonShareIsUnknown) {
  testing::TempDir other;
  testing::write_scenario_node(other.path(), /*daemon_heartbeat=*/false);
  Status s = read_status_from_regions(other.path().string(), testing::scenario_gpus(),
                                      testing::fixed_now());
  EXPECT_FALSE(s.daemon.up);
  for (const auto& a : s.allocations)
    for (const auto& g : a.gpus) EXPECT_FALSE(g.share_achieved_ppm.has_value());
  anonymise_model(s, other.path().string(), "<RUN>");
  expect_golden("status_node_no_daemon.txt", render_status(s));
}

TEST_F(StatusGolden, JsonRoundTripsThroughTheModel) {
  const Status s = status();
  const nlohmann::json once = to_json(s);
  EXPECT_EQ(to_json(status_from_json(once)), once);
  EXPECT_EQ(render_status(status_from_json(once)), render_status(s));
}

TEST_F(StatusGolden, FutureLayoutVersionIsAProblemNotACrash) {
  const Status s = status();
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].alloc, "zz-future");
  EXPECT_NE(s.problems[0].error.find("layout version 2"), std::string::npos) << s.problems[0].error;
  EXPECT_THROW(read_allocation(run_dir().string(), "zz-future", testing::fixed_now()),
               RegionReadError);
}

// Without the slot walk the per-GPU figures are the same; only what is
// counted from the slots is left out.
TEST_F(StatusGolden, SkippingTheSlotsKeepsEveryGpuFigure) {
  const std::string folder = allocation_dir(run_dir().string(), "team-a");
  const AllocationFiles files = open_allocation(folder);
  const Allocation full = allocation_from_regions(files.views(), folder, testing::fixed_now());
  Allocation light =
      allocation_from_regions(files.views(), folder, testing::fixed_now(), ProcessSlots::kSkip);
  ASSERT_FALSE(full.processes.empty()) << "the scenario's team-a has processes";
  EXPECT_TRUE(light.processes.empty());
  ASSERT_EQ(light.gpus.size(), full.gpus.size());
  for (std::size_t i = 0; i < full.gpus.size(); ++i) {
    EXPECT_EQ(light.gpus[i].tracked_bytes, 0u);
    EXPECT_EQ(light.gpus[i].overhead_bytes, 0u);
    EXPECT_EQ(light.gpus[i].processes, 0u);
    light.gpus[i].tracked_bytes = full.gpus[i].tracked_bytes;
    light.gpus[i].overhead_bytes = full.gpus[i].overhead_bytes;
    light.gpus[i].processes = full.gpus[i].processes;
  }
  light.processes = full.processes;
  EXPECT_EQ(to_json(light), to_json(full));
}

TEST_F(StatusGolden, UnknownAllocationIsNotFound) {
  EXPECT_THROW(read_allocation(run_dir().string(), "nobody", testing::fixed_now()), NotFoundError);
  EXPECT_THROW(read_allocation(run_dir().string(), "../etc", testing::fixed_now()), NotFoundError);
}

}  // namespace
}  // namespace cushare::tools
