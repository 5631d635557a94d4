// The control socket end to end in-process: ControlServer + the daemon's
// handler over a node run dir written by the test, driven by the CLI's client.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "node/region_reader.hpp"
#include "node/run_dir.hpp"
#include "node/status_json.hpp"
#include "region_fixture.hpp"
#include "scenario.hpp"
#include "scheduler/control_handler.hpp"
#include "scheduler/control_server.hpp"
#include "shm/limits_seqlock.hpp"
#include "tools/control_client.hpp"

namespace cushare::sched {
namespace {

using nlohmann::json;

class ControlSocket : public ::testing::Test {
 protected:
  void SetUp() override {
    tools::testing::write_scenario_node(tmp_.path());
    handler_ = std::make_unique<RunDirControlHandler>(
        ControlHandlerConfig{tmp_.path(),
                             10'000'000,
                             [] { return tools::testing::scenario_gpus(); },
                             [] { return tools::testing::fixed_now(); },
                             {}});
    server_ = std::make_unique<ControlServer>(socket(), *handler_);
  }
  std::string socket() const { return tools::socket_path(tmp_.path().string()); }
  json call(const json& request) { return tools::control_call(socket(), request); }

  // Sends raw bytes, returns every line received until the server answers `lines` lines.
  std::vector<std::string> raw(const std::string& bytes, std::size_t lines) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, socket().c_str());
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    std::string got;
    char buf[4096];
    while (static_cast<std::size_t>(std::count(got.begin(), got.end(), '\n')) < lines) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    std::vector<std::string> out;
    std::size_t start = 0, nl;
    while ((nl = got.find('\n', start)) != std::string::npos) {
      out.push_back(got.substr(start, nl - start));
      start = nl + 1;
    }
    return out;
  }

  tools::testing::TempDir tmp_;
  std::unique_ptr<RunDirControlHandler> handler_;
  std::unique_ptr<ControlServer> server_;
};

TEST_F(ControlSocket, PingAndStatusFromTheDaemon) {
  EXPECT_EQ(call({{"cmd", "ping"}}).at("pid").get<int>(), ::getpid());
  const tools::Status status = tools::status_from_json(call({{"cmd", "status"}}));
  EXPECT_EQ(status.source, "daemon");
  EXPECT_TRUE(status.daemon.up);
  EXPECT_EQ(status.allocations.size(), 3u);
  EXPECT_EQ(status.problems.size(), 1u);
  EXPECT_EQ(status.gpus.size(), 2u);
}

TEST_F(ControlSocket, InspectAndNotFound) {
  const json result = call({{"cmd", "inspect"}, {"alloc", "team-a"}});
  EXPECT_EQ(result.at("allocation").at("id"), "team-a");
  try {
    call({{"cmd", "inspect"}, {"alloc", "nobody"}});
    FAIL() << "no error for an unknown allocation";
  } catch (const tools::ControlRequestFailed& e) {
    EXPECT_EQ(e.code(), "not_found");
  }
}

TEST_F(ControlSocket, SetChangesTheLimitsRegionLive) {
  // A "shim" keeps the region mapped while the daemon changes it.
  tools::LimitsFile live = tools::open_limits((tmp_.path() / "alloc/team-a/limits").string());
  const json set = {
      {"alloc", "team-a"}, {"memory_limit_bytes", 1ull << 30}, {"compute_limit_pct", 25}};
  const json result = call({{"cmd", "set"}, {"set", set}});
  ASSERT_EQ(result.at("entries").size(), 1u);
  EXPECT_EQ(result.at("entries")[0].at("after").at("memory_limit_bytes"), 1ull << 30);
  EXPECT_EQ(result.at("warnings").size(), 1u);  // 3.8Gi in use > 1Gi
  const shm::GpuLimitsSnapshot now = shm::read_gpu_limits(*live.region(), 0);
  EXPECT_EQ(now.memory_limit_bytes, 1ull << 30);
  EXPECT_EQ(now.compute_limit_pct, 25u);
  EXPECT_EQ(now.weight, 50u);
}

TEST_F(ControlSocket, SetRejectsBadValuesAndStrangers) {
  try {
    call({{"cmd", "set"}, {"set", {{"alloc", "team-a"}, {"compute_limit_pct", 400}}}});
    FAIL();
  } catch (const tools::ControlRequestFailed& e) {
    EXPECT_EQ(e.code(), "bad_request");
  }
  try {
    call({{"cmd", "set"}, {"set", {{"alloc", "../../etc"}, {"weight", 2}}}});
    FAIL();
  } catch (const tools::ControlRequestFailed& e) {
    EXPECT_EQ(e.code(), "not_found");
  }
  const json denied =
      handler_->handle({{"cmd", "set"}, {"set", {{"alloc", "team-a"}, {"weight", 2}}}},
                       PeerCredentials{1, 54321, 54321});
  EXPECT_EQ(denied.at("code"), "forbidden");
}

TEST_F(ControlSocket, MalformedAndPipelinedLines) {
  const auto lines = raw("{not json\n{\"cmd\":\"ping\"}\n{\"cmd\":\"nope\"}\n", 3);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(json::parse(lines[0]).at("code"), "bad_request");
  EXPECT_TRUE(json::parse(lines[1]).at("ok").get<bool>());
  EXPECT_EQ(json::parse(lines[2]).at("code"), "bad_request");
  EXPECT_EQ(server_->requests_served(), 3u);
}

TEST_F(ControlSocket, SecondServerRefusedStaleSocketReplaced) {
  EXPECT_THROW(ControlServer(socket(), *handler_), std::runtime_error);
  server_->stop();
  EXPECT_FALSE(std::filesystem::exists(socket()));
  EXPECT_THROW(call({{"cmd", "ping"}}), tools::DaemonUnavailable);
  // A socket file nobody serves (crashed daemon) is replaced.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, socket().c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
  EXPECT_THROW(call({{"cmd", "ping"}}), tools::DaemonUnavailable);
  ControlServer again(socket(), *handler_);
  EXPECT_NO_THROW(call({{"cmd", "ping"}}));
}

TEST_F(ControlSocket, SilentClientDoesNotBlockOthers) {
  const int idle = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, socket().c_str());
  ASSERT_EQ(::connect(idle, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::send(idle, "{\"cmd\":", 7, 0), 7);  // half a request, then silence
  EXPECT_NO_THROW(call({{"cmd", "ping"}}));
  ::close(idle);
}

}  // namespace
}  // namespace cushare::sched
