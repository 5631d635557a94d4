// The metrics endpoint's request rules (pure) and its listener.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "scheduler/daemon_options.hpp"
#include "scheduler/metrics_http_request.hpp"
#include "scheduler/metrics_server.hpp"

namespace cushare::sched::http {
namespace {

constexpr std::size_t kMax = 8192;

Verdict parse(std::string_view s) {
  return parse_request(s, kMax);
}

void expect_status(std::string_view request, int status) {
  const Verdict v = parse(request);
  EXPECT_EQ(v.kind, Verdict::Kind::respond) << request;
  EXPECT_EQ(v.status, status) << request;
  EXPECT_FALSE(v.keep_alive) << request;
}

TEST(MetricsHttp, ServesTheTwoGetEndpoints) {
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: node:9400\r\nAccept: */*\r\n\r\n";
  Verdict v = parse(req);
  EXPECT_EQ(v.kind, Verdict::Kind::respond);
  EXPECT_EQ(v.status, 200);
  EXPECT_EQ(v.endpoint, Endpoint::metrics);
  EXPECT_TRUE(v.keep_alive);
  EXPECT_EQ(v.head_bytes, req.size());

  v = parse("GET /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(v.status, 200);
  EXPECT_EQ(v.endpoint, Endpoint::healthz);
  // The query is not part of the path.
  EXPECT_EQ(parse("GET /metrics?name[]=up HTTP/1.1\r\n\r\n").endpoint, Endpoint::metrics);
  // Bare line feeds are accepted, as HTTP allows a recipient to.
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\nHost: x\n\n").status, 200);
  // An explicit empty body is no body.
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").status, 200);
}

TEST(MetricsHttp, EveryPrefixOfARequestIsIncomplete) {
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: Prometheus/2.0\r\n\r\n";
  for (std::size_t n = 0; n < req.size(); ++n)
    EXPECT_EQ(parse(std::string_view(req).substr(0, n)).kind, Verdict::Kind::incomplete) << n;
}

TEST(MetricsHttp, KeepAliveFollowsTheVersionAndConnectionHeader) {
  EXPECT_FALSE(parse("GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive);
  EXPECT_FALSE(parse("GET /metrics HTTP/1.1\r\nconnection: Upgrade, CLOSE\r\n\r\n").keep_alive);
  EXPECT_FALSE(parse("GET /metrics HTTP/1.0\r\n\r\n").keep_alive);
  EXPECT_TRUE(parse("GET /metrics HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
}

TEST(MetricsHttp, PipelinedRequestsAreTakenOneAtATime) {
  const std::string first = "GET /healthz HTTP/1.1\r\n\r\n";
  const Verdict v = parse(first + "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(v.endpoint, Endpoint::healthz);
  EXPECT_EQ(v.head_bytes, first.size());
}

TEST(MetricsHttp, UnknownPathsAndOtherMethodsAreRefused) {
  expect_status("GET / HTTP/1.1\r\n\r\n", 404);
  expect_status("GET /metrics/ HTTP/1.1\r\n\r\n", 404);
  expect_status("GET /metricsx HTTP/1.1\r\n\r\n", 404);
  expect_status("GET http://node/metrics HTTP/1.1\r\n\r\n", 404);
  expect_status("POST /x HTTP/1.1\r\n\r\n", 404);
  expect_status("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405);
  expect_status("HEAD /healthz HTTP/1.1\r\n\r\n", 405);
  expect_status("DELETE /metrics HTTP/1.1\r\n\r\n", 405);
  EXPECT_EQ(parse("HEAD /healthz HTTP/1.1\r\n\r\n").endpoint, Endpoint::none);
}

TEST(MetricsHttp, AnAnnouncedBodyIsRefusedFromItsHeaderLine) {
  // Decided as soon as the header line is in, before the head ends and
  // before any body byte.
  expect_status("POST /metrics HTTP/1.1\r\nContent-Length: 1073741824\r\n", 413);
  expect_status("POST /metrics HTTP/1.1\r\ncontent-length:5\r\n\r\nhello", 413);
  expect_status("GET /metrics HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n", 413);
  expect_status("GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 413);
  expect_status("GET /nothing HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n", 413);
  expect_status("GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n", 400);
  expect_status("GET /metrics HTTP/1.1\r\nContent-Length: 1 2\r\n", 400);
  expect_status("GET /metrics HTTP/1.1\r\nContent-Length:\r\n", 400);
}

TEST(MetricsHttp, MalformedHeadsAreRefused) {
  expect_status("\r\nGET /metrics HTTP/1.1\r\n\r\n", 400);
  expect_status("GET /metrics\r\n\r\n", 400);
  expect_status("GET  /metrics HTTP/1.1\r\n\r\n", 400);
  expect_status("GET /metrics HTTP/1.1 \r\n\r\n", 400);
  expect_status("G(T /metrics HTTP/1.1\r\n\r\n", 400);
  expect_status("GET /met\x01rics HTTP/1.1\r\n\r\n", 400);
  expect_status("GET /metrics HTTX/1.1\r\n\r\n", 400);
  expect_status("GET /metrics HTTP/1.1\r\nNoColon\r\n\r\n", 400);
  expect_status("GET /metrics HTTP/1.1\r\nHost : x\r\n\r\n", 400);
  expect_status("GET /metrics HTTP/1.1\r\nA: b\r\n  folded\r\n\r\n", 400);
  expect_status("GET /metrics HTTP/2.0\r\n\r\n", 505);
  expect_status("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505);
}

TEST(MetricsHttp, TheHeadIsBounded) {
  const std::string line = "GET /metrics HTTP/1.1\r\n";
  // A head that never ends: refused once the limit is reached, not before.
  std::string endless = line + "X-Slow: " + std::string(kMax, 'a');
  EXPECT_EQ(parse(std::string_view(endless).substr(0, kMax - 1)).kind, Verdict::Kind::incomplete);
  expect_status(std::string_view(endless).substr(0, kMax), 431);
  // Many short header lines count the same.
  std::string many = line;
  while (many.size() < kMax) many += "X: y\r\n";
  expect_status(many, 431);
  // A complete head of exactly the limit is served; one byte more is not.
  std::string fits = line + "X: ";
  fits += std::string(kMax - fits.size() - 4, 'a') + "\r\n\r\n";
  ASSERT_EQ(fits.size(), kMax);
  EXPECT_EQ(parse(fits).status, 200);
  expect_status("X" + fits, 431);
}

TEST(MetricsHttp, ResponsesCarryLengthAndConnection) {
  const std::string ok = format_response(200, "text/plain", "abc\n", true);
  EXPECT_EQ(ok,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n"
            "Connection: keep-alive\r\n\r\nabc\n");
  const std::string refused = format_error(405, "only GET is served");
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 405 Method Not Allowed\r\n")) << refused;
  EXPECT_NE(refused.find("\r\nAllow: GET\r\n"), std::string::npos);
  EXPECT_NE(refused.find("\r\nConnection: close\r\n"), std::string::npos);
  EXPECT_TRUE(refused.ends_with("\r\n\r\nonly GET is served\n"));
  EXPECT_NE(format_error(413, "x").find("Content-Length: 2\r\n"), std::string::npos);
}

}  // namespace
}  // namespace cushare::sched::http

namespace cushare::sched {
namespace {

int port_of(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

std::string get(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{.tv_sec = 10, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
      out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

TEST(MetricsAddress, AnEmptyHostIsEveryInterface) {
  EXPECT_EQ(split_host_port(":9410"), std::make_pair(std::string(), 9410));
  EXPECT_EQ(split_host_port("0.0.0.0:9410"), std::make_pair(std::string("0.0.0.0"), 9410));
  EXPECT_EQ(split_host_port("[::]:9410"), std::make_pair(std::string("::"), 9410));
  EXPECT_EQ(split_host_port("10.0.0.7:9410"), std::make_pair(std::string("10.0.0.7"), 9410));
  for (const char* bad : {"9410", ":", "host:", ":x", ":70000"})
    EXPECT_THROW(split_host_port(bad), std::runtime_error) << bad;
}

TEST(MetricsServer, AnswersAndRefusesASecondListenerOnItsPort) {
  MetricsServer server(
      "127.0.0.1", 0,
      {.metrics = [] { return std::string("up 1\n"); }, .healthy = [] { return true; }});
  const int port = port_of(server.address());
  ASSERT_GT(port, 0) << server.address();
  const std::string reply = get(port, "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 200 OK\r\n")) << reply;
  EXPECT_TRUE(reply.ends_with("\r\n\r\nup 1\n")) << reply;
  EXPECT_TRUE(get(port, "GET /healthz HTTP/1.0\r\n\r\n").ends_with("\r\n\r\nok\n"));
  EXPECT_TRUE(get(port, "GET /x HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 404 "));

  // "" is every interface, IPv6 and IPv4 on one socket: it must collide
  // with the IPv4 listener too.
  for (const char* host : {"127.0.0.1", "0.0.0.0", ""}) {
    try {
      MetricsServer second(
          host, port, {.metrics = [] { return std::string(); }, .healthy = [] { return true; }});
      ADD_FAILURE() << "a second server listens on '" << host << "': " << second.address();
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("Address already in use"), std::string::npos)
          << e.what();
    }
  }
}

TEST(MetricsServer, AnEmptyHostListensOnEveryInterface) {
  MetricsServer server(
      "", 0, {.metrics = [] { return std::string("up 1\n"); }, .healthy = [] { return true; }});
  const int port = port_of(server.address());
  ASSERT_GT(port, 0) << server.address();
  // get() dials 127.0.0.1: an IPv4 client reaches the wildcard listener.
  EXPECT_TRUE(get(port, "GET /healthz HTTP/1.0\r\n\r\n").ends_with("\r\n\r\nok\n"));
}

}  // namespace
}  // namespace cushare::sched
