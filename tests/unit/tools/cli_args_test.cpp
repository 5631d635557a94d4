// The pure pieces behind cusharectl's command line: command suggestions,
// output formats, folder checks, --gpu resolution, whole byte counts, and
// the daemon-heartbeat test the share columns depend on.
#include <gtest/gtest.h>

#include <stdexcept>

#include "node/status_model.hpp"
#include "node/whole_bytes.hpp"
#include "region_fixture.hpp"
#include "scenario.hpp"
#include "tools/command_suggest.hpp"
#include "tools/gpu_selector.hpp"
#include "tools/output_format.hpp"
#include "tools/path_args.hpp"

namespace cushare::tools {
namespace {

const std::vector<std::string> kCommands = {"status", "top",    "inspect", "set",
                                            "create", "remove", "doctor"};

TEST(CommandSuggest, EditDistanceCountsSwapsAsOne) {
  EXPECT_EQ(edit_distance("status", "status"), 0u);
  EXPECT_EQ(edit_distance("stauts", "status"), 1u);  // neighbours swapped
  EXPECT_EQ(edit_distance("statu", "status"), 1u);
  EXPECT_EQ(edit_distance("creat", "create"), 1u);
  EXPECT_EQ(edit_distance("", "top"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(CommandSuggest, NearestKnownCommandOrNothing) {
  EXPECT_EQ(suggest_command("stauts", kCommands), "status");
  EXPECT_EQ(suggest_command("sett", kCommands), "set");
  EXPECT_EQ(suggest_command("tpo", kCommands), "top");
  EXPECT_EQ(suggest_command("inspcet", kCommands), "inspect");
  EXPECT_EQ(suggest_command("docter", kCommands), "doctor");
  EXPECT_EQ(suggest_command("rem", kCommands), "remove");  // the start of one name
  EXPECT_EQ(suggest_command("cr", kCommands), "create");
  EXPECT_EQ(suggest_command("s", kCommands), std::nullopt);  // status and set
  EXPECT_EQ(suggest_command("frobnicate", kCommands), std::nullopt);
  EXPECT_EQ(suggest_command("ls", kCommands), std::nullopt);
  EXPECT_EQ(suggest_command("", kCommands), std::nullopt);
}

TEST(OutputFormat, NamesAndWidths) {
  EXPECT_EQ(parse_output_format("table"), OutputFormat::kTable);
  EXPECT_EQ(parse_output_format("wide"), OutputFormat::kWide);
  EXPECT_EQ(parse_output_format("json"), OutputFormat::kJson);
  EXPECT_EQ(parse_output_format("yaml"), std::nullopt);
  EXPECT_EQ(parse_output_format("JSON"), std::nullopt);
  EXPECT_EQ(table_width(OutputFormat::kTable), 80u);
  EXPECT_GT(table_width(OutputFormat::kWide), 1000u);
}

TEST(PathArgs, RunDirMustBeAbsolute) {
  EXPECT_EQ(check_absolute_dir("/var/run/cushare", "--run-dir"), std::nullopt);
  const auto empty = check_absolute_dir("", "--run-dir");
  ASSERT_TRUE(empty);
  EXPECT_NE(empty->find("--run-dir is empty"), std::string::npos) << *empty;
  const auto relative = check_absolute_dir("run", "CUSHARE_RUN_DIR");
  ASSERT_TRUE(relative);
  EXPECT_NE(relative->find("CUSHARE_RUN_DIR 'run' is a relative path"), std::string::npos)
      << *relative;
}

TEST(PathArgs, ContainerDirMustBeMountable) {
  EXPECT_EQ(check_container_dir("/var/run/cushare", "--container-run-dir"), std::nullopt);
  EXPECT_TRUE(check_container_dir("var/run/cushare", "--container-run-dir"));
  EXPECT_TRUE(check_container_dir("", "--container-run-dir"));
  EXPECT_TRUE(check_container_dir("/a:b", "--container-run-dir"));
}

TEST(GpuSelector, UuidsPassIndexesResolveThroughNvml) {
  const auto gpus = testing::scenario_gpus();
  EXPECT_EQ(resolve_gpu_args({"1", testing::kUuid0}, gpus),
            (std::vector<std::string>{testing::kUuid1, testing::kUuid0}));
  EXPECT_EQ(resolve_gpu_args({"GPU-anything"}, {}), std::vector<std::string>{"GPU-anything"});
  EXPECT_EQ(resolve_gpu_args({"MIG-1234"}, {}), std::vector<std::string>{"MIG-1234"});
  EXPECT_TRUE(resolve_gpu_args({}, {}).empty());
}

TEST(GpuSelector, RefusesWhatWouldMatchNoGpu) {
  const auto gpus = testing::scenario_gpus();
  auto message = [](const std::vector<std::string>& args, const std::vector<GpuInfo>& g) {
    try {
      resolve_gpu_args(args, g);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message({"1"}, {}).find("needs NVML"), std::string::npos) << message({"1"}, {});
  EXPECT_NE(message({"2"}, gpus).find("no GPU 2"), std::string::npos) << message({"2"}, gpus);
  EXPECT_NE(message({"gpu0"}, gpus).find("neither a GPU UUID"), std::string::npos);
  EXPECT_NE(message({"0", testing::kUuid0}, gpus).find("a second time"), std::string::npos);
  EXPECT_NE(message({""}, gpus).find("neither"), std::string::npos);
}

TEST(WholeBytes, FractionsOfAByteAreNotWhole) {
  for (const char* whole :
       {"8Gi", "1.5Gi", "0.5Ki", "1e3", "2.5k", "1.0", "+7", "1.25Ki", "5.", "0.000001E", "12e0"})
    EXPECT_TRUE(is_whole_byte_count(whole)) << whole;
  for (const char* fractional : {"1.5", "1.3Ki", "1e-1", "0.5", "1.0000001Gi", "2.5e0"})
    EXPECT_FALSE(is_whole_byte_count(fractional)) << fractional;
}

// The daemon ticks while a reader builds its snapshot: a heartbeat stamped
// after the reader took its clock is newer than "now", and must count as up.
TEST(DaemonHeartbeat, FreshInBothOrders) {
  constexpr std::uint64_t now = testing::kNowMono;
  EXPECT_TRUE(heartbeat_fresh(now - 200'000'000, now));  // older than now, recent
  EXPECT_TRUE(heartbeat_fresh(now, now));
  EXPECT_TRUE(heartbeat_fresh(now + 1, now));  // newer than now
  EXPECT_TRUE(heartbeat_fresh(now + 50'000'000, now));
  EXPECT_FALSE(heartbeat_fresh(now - kDaemonStaleNs, now));  // stale
  EXPECT_FALSE(heartbeat_fresh(0, now));                     // never beat
}

TEST(DaemonHeartbeat, SharesShownWhenTheBeatIsNewerThanTheSnapshot) {
  testing::RegionPair r = testing::make_regions("a", 0, shm::kCreatedByCtl);
  testing::set_gpu(r, 0, testing::kUuid0, 1ull << 30, 50, 50, shm::ComputeMode::kCapped);
  r.limits->gpus[0].share_target_ppm = 500'000;
  r.limits->gpus[0].share_achieved_ppm = 490'000;
  r.limits->daemon_heartbeat_ns = testing::kNowMono + 1'000'000;  // ticked after the clock read
  const RegionViews views{r.limits.get(), r.usage.get()};
  const Allocation alloc = allocation_from_regions(views, "/x", testing::fixed_now());
  ASSERT_EQ(alloc.gpus.size(), 1u);
  EXPECT_EQ(alloc.gpus[0].share_target_ppm, 500'000u);
  EXPECT_EQ(alloc.gpus[0].share_achieved_ppm, 490'000u);
  EXPECT_TRUE(daemon_from_regions({views}, testing::fixed_now()).up);
}

}  // namespace
}  // namespace cushare::tools
