#include "scheduler/metrics_server.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "scheduler/metrics_http_request.hpp"

namespace cushare::sched {
namespace {

// Accepts per wake-up: a connection flood cannot keep the loop from reading
// the requests of the connections it already has.
constexpr int kAcceptBurst = 32;
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

std::string format_address(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(addr);
    ::inet_ntop(AF_INET6, &a6.sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(a6.sin6_port));
  }
  const auto& a4 = reinterpret_cast<const sockaddr_in&>(addr);
  ::inet_ntop(AF_INET, &a4.sin_addr, host, sizeof(host));
  return std::string(host) + ":" + std::to_string(ntohs(a4.sin_port));
}

// SO_REUSEADDR only, so a restart can bind while old connections sit in
// TIME_WAIT; on Linux it still refuses a second listener on the port.
// SO_REUSEPORT is never set: it would let a second daemon share the port and
// split the scrapes between the two.
bool bind_and_listen(int fd, const addrinfo& ai, bool dual_stack) {
  const int yes = 1;
  const int no = 0;
  return ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes)) == 0 &&
         (!dual_stack || ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no)) == 0) &&
         ::bind(fd, ai.ai_addr, ai.ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0;
}

// An empty host is every interface: one IPv6 socket that also takes IPv4
// (what ":PORT" means to Go servers such as dcgm-exporter), or 0.0.0.0 where
// the kernel has no IPv6.
int listen_on(const std::string& host, int port, std::string& bound) {
  const bool any = host.empty();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (const int rc =
          ::getaddrinfo(any ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0)
    throw std::runtime_error("cannot resolve metrics address " + where + ": " + ::gai_strerror(rc));
  int err = EADDRNOTAVAIL;
  auto first_of = [&](int family) {
    for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      if (family != AF_UNSPEC && ai->ai_family != family) continue;
      const int fd =
          ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        err = errno;
        continue;
      }
      if (bind_and_listen(fd, *ai, any && ai->ai_family == AF_INET6)) return fd;
      err = errno;
      ::close(fd);
    }
    return -1;
  };
  // For every interface the IPv6 wildcard first, whatever order the resolver
  // gave; IPv4 only when IPv6 failed for another reason than a port in use
  // (which is in use on IPv4 as well, and is the error to report).
  int fd = first_of(any ? AF_INET6 : AF_UNSPEC);
  if (fd < 0 && any && err != EADDRINUSE) fd = first_of(AF_INET);
  ::freeaddrinfo(found);
  if (fd < 0) {
    std::string message = "cannot listen on " + where + " for metrics: " + std::strerror(err);
    if (err == EADDRINUSE) message += " (another cushared, or another exporter, has the port)";
    throw std::runtime_error(message);
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  bound = ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 ? format_address(addr)
                                                                           : where;
  return fd;
}

std::uint32_t events_for(bool writing) {
  return writing ? EPOLLOUT : EPOLLIN | EPOLLRDHUP;
}

}  // namespace

MetricsServer::MetricsServer(const std::string& host, int port, MetricsEndpoints endpoints,
                             MetricsServerOptions options)
    : endpoints_(std::move(endpoints)), options_(options) {
  listen_fd_ = listen_on(host, port, address_);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event listen_ev{.events = EPOLLIN, .data = {.fd = listen_fd_}};
  epoll_event wake_ev{.events = EPOLLIN, .data = {.fd = wake_fd_}};
  if (epoll_fd_ < 0 || wake_fd_ < 0 ||
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listen_ev) != 0 ||
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake_ev) != 0) {
    const int err = errno;
    for (const int fd : {listen_fd_, epoll_fd_, wake_fd_})
      if (fd >= 0) ::close(fd);
    throw std::runtime_error(std::string("metrics server: ") + std::strerror(err));
  }
  thread_ = std::thread([this] { serve(); });
}

MetricsServer::~MetricsServer() {
  stop();
}

void MetricsServer::stop() {
  if (stopping_.exchange(true)) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  for (const auto& [fd, c] : connections_) ::close(fd);
  connections_.clear();
  for (const int fd : {listen_fd_, epoll_fd_, wake_fd_}) ::close(fd);
}

void MetricsServer::serve() {
  std::array<epoll_event, 64> events;
  int timeout_ms = -1;
  while (!stopping_.load()) {
    int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0) {
      if (errno != EINTR) {
        spdlog::error("metrics server stopped: epoll_wait: {}", std::strerror(errno));
        return;
      }
      n = 0;
    }
    const auto now = Clock::now();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) return;
      if (fd == listen_fd_) {
        accept_connections(now);
        continue;
      }
      // Gone already when an accept above evicted it; a new connection that
      // reused the number just sees a spurious wake-up (non-blocking I/O).
      const auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      if (it->second.state == Connection::State::writing)
        on_writable(fd, it->second, now);
      else
        on_readable(fd, it->second, now);
    }
    timeout_ms = expire(now);
  }
}

void MetricsServer::accept_connections(Clock::time_point now) {
  for (int i = 0; i < kAcceptBurst; ++i) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      // Out of descriptors or memory: the pending connection stays queued
      // and the listener readable, so stop polling it for a moment rather
      // than spin on it.
      spdlog::debug("metrics server: accept: {}; pausing", std::strerror(errno));
      epoll_event ev{.events = 0, .data = {.fd = listen_fd_}};
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
      accept_paused_ = true;
      accept_resume_ = now + kAcceptPause;
      return;
    }
    if (connections_.size() >= options_.max_connections) evict_one();
    epoll_event ev{.events = events_for(false), .data = {.fd = fd}};
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    Connection& c = connections_[fd];
    c.phase_start = now;
    c.deadline = now + options_.request_timeout;
  }
}

// The least useful connection goes: one that has sent nothing of a request
// (new or kept alive) or is lingering after a refusal, before one halfway
// through a request head, before one being answered; the oldest first, so
// a client that connects to scrape is the last to be evicted.
void MetricsServer::evict_one() {
  auto rank = [](const Connection& c) {
    if (c.state == Connection::State::writing) return 2;
    return c.state == Connection::State::reading && !c.in.empty() ? 1 : 0;
  };
  auto victim = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (victim == connections_.end() || rank(it->second) < rank(victim->second) ||
        (rank(it->second) == rank(victim->second) &&
         it->second.phase_start < victim->second.phase_start))
      victim = it;
  }
  if (victim != connections_.end()) close_connection(victim->first);
}

void MetricsServer::on_readable(int fd, Connection& c, Clock::time_point now) {
  if (c.state == Connection::State::lingering) {
    std::array<char, 4096> discard;
    const ssize_t n = ::recv(fd, discard.data(), discard.size(), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0 || (c.lingered += static_cast<std::size_t>(n)) >= options_.linger_bytes)
      close_connection(fd);
    return;
  }
  // Never more than the head limit is held: the parser refuses a head that
  // fills it.
  const std::size_t old = c.in.size();
  c.in.resize(options_.max_head_bytes);
  const ssize_t n = ::recv(fd, c.in.data() + old, c.in.size() - old, 0);
  c.in.resize(old + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    close_connection(fd);
    return;
  }
  if (old == 0 && c.served > 0) c.deadline = now + options_.request_timeout;
  answer(fd, c, now);
}

void MetricsServer::answer(int fd, Connection& c, Clock::time_point now) {
  const http::Verdict v = http::parse_request(c.in, options_.max_head_bytes);
  if (v.kind == http::Verdict::Kind::incomplete) return;
  if (v.status != 200) {
    c.out = http::format_error(v.status, v.reason);
    c.close_after_write = true;
  } else {
    const bool keep_alive = v.keep_alive && c.served + 1 < options_.max_requests_per_connection;
    try {
      if (v.endpoint == http::Endpoint::metrics) {
        c.out = http::format_response(200, "text/plain; version=0.0.4; charset=utf-8",
                                      endpoints_.metrics(), keep_alive);
        c.close_after_write = !keep_alive;
      } else if (endpoints_.healthy()) {
        c.out = http::format_response(200, "text/plain; charset=utf-8", "ok\n", keep_alive);
        c.close_after_write = !keep_alive;
      } else {
        c.out = http::format_error(503, "stopping");
        c.close_after_write = true;
      }
    } catch (const std::exception& e) {
      spdlog::warn("metrics request failed: {}", e.what());
      c.out = http::format_error(500, "internal error");
      c.close_after_write = true;
    }
  }
  ++c.served;
  if (c.close_after_write)
    c.in.clear();
  else
    c.in.erase(0, v.head_bytes);  // a pipelined next request stays
  c.out_sent = 0;
  enter(fd, c, Connection::State::writing, now);
  on_writable(fd, c, now);  // a response nearly always fits the socket buffer
}

void MetricsServer::on_writable(int fd, Connection& c, Clock::time_point now) {
  while (c.out_sent < c.out.size()) {
    const ssize_t n =
        ::send(fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n < 0) {
      close_connection(fd);
      return;
    }
    c.out_sent += static_cast<std::size_t>(n);
  }
  std::string().swap(c.out);
  if (c.close_after_write) {
    // Closing with unread input makes the kernel send a reset, which can
    // destroy the response before the client reads it: close our side,
    // discard what still comes for a short while, then close.
    ::shutdown(fd, SHUT_WR);
    enter(fd, c, Connection::State::lingering, now);
    return;
  }
  enter(fd, c, Connection::State::reading, now);
  if (!c.in.empty()) {
    c.deadline = now + options_.request_timeout;
    answer(fd, c, now);
  }
}

void MetricsServer::enter(int fd, Connection& c, Connection::State state, Clock::time_point now) {
  const bool was_writing = c.state == Connection::State::writing;
  c.state = state;
  c.phase_start = now;
  switch (state) {
    case Connection::State::reading:
      c.deadline = now + options_.keep_alive_timeout;
      break;
    case Connection::State::writing:
      c.deadline = now + options_.write_timeout;
      break;
    case Connection::State::lingering:
      c.deadline = now + options_.linger_timeout;
      break;
  }
  const bool writing = state == Connection::State::writing;
  if (writing != was_writing) {
    epoll_event ev{.events = events_for(writing), .data = {.fd = fd}};
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
  }
}

void MetricsServer::close_connection(int fd) {
  ::close(fd);  // also leaves the epoll set
  connections_.erase(fd);
}

int MetricsServer::expire(Clock::time_point now) {
  if (accept_paused_ && now >= accept_resume_) {
    epoll_event ev{.events = EPOLLIN, .data = {.fd = listen_fd_}};
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    accept_paused_ = false;
  }
  auto next = accept_paused_ ? accept_resume_ : Clock::time_point::max();
  for (auto it = connections_.begin(); it != connections_.end();) {
    Connection& c = it->second;
    if (c.deadline > now) {
      next = std::min(next, c.deadline);
      ++it;
      continue;
    }
    if (c.state == Connection::State::reading && !c.in.empty()) {
      // Best effort, never waited for: the client learns why it was cut off.
      const std::string timeout = http::format_error(408, "request head not complete in time");
      [[maybe_unused]] const ssize_t n =
          ::send(it->first, timeout.data(), timeout.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    ::close(it->first);
    it = connections_.erase(it);
  }
  if (next == Clock::time_point::max()) return -1;
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - now);
  return static_cast<int>(std::max<std::chrono::milliseconds::rep>(wait.count(), 0)) + 1;
}

}  // namespace cushare::sched
