// cushared's HTTP endpoint: GET /metrics and GET /healthz, on one thread
// that multiplexes every connection with epoll. A thread-per-connection
// server lets idle or slow clients pin its workers and starve the scrapes;
// here a silent or dribbling client costs one slot with a deadline, the
// slots are capped, and at the cap the oldest idle one makes room. What a
// request may be is decided by metrics_http_request.hpp. Limits and why:
// docs/scheduler.md, "The HTTP endpoint".
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

namespace cushare::sched {

struct MetricsEndpoints {
  std::function<std::string()> metrics;  // Prometheus text exposition
  std::function<bool()> healthy;         // /healthz: 200 when true, else 503
};

struct MetricsServerOptions {
  std::size_t max_connections = 256;  // at the cap, a new one evicts the least useful
  std::size_t max_head_bytes = 8192;  // request line plus headers
  // From a connection's accept (or a kept-alive one's first byte) to its
  // complete request head.
  std::chrono::milliseconds request_timeout{2000};
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle between two requests
  std::chrono::milliseconds write_timeout{2000};       // to send one response
  // After a refusal: how long, and how much, the unread rest of the request
  // is discarded before closing, so the client reads the error instead of
  // a reset.
  std::chrono::milliseconds linger_timeout{1000};
  std::size_t linger_bytes = 65536;
  unsigned max_requests_per_connection = 100;
};

class MetricsServer {
 public:
  // Binds and listens on host:port (a numeric address or a name), then
  // serves on its own thread. Throws std::runtime_error naming the address
  // and the reason, e.g. when another process listens on the port.
  MetricsServer(const std::string& host, int port, MetricsEndpoints endpoints,
                MetricsServerOptions options = {});
  ~MetricsServer();  // stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Closes the listener and every connection, joins the thread. Idempotent.
  void stop();

  // The address actually bound, "HOST:PORT" (with the real port for port 0).
  const std::string& address() const { return address_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Connection {
    enum class State { reading, writing, lingering };
    State state = State::reading;
    std::string in;
    std::string out;
    std::size_t out_sent = 0;
    bool close_after_write = false;
    Clock::time_point phase_start;  // of the current state (idle counts from a response's end)
    Clock::time_point deadline;
    std::size_t lingered = 0;
    unsigned served = 0;
  };

  void serve();
  void accept_connections(Clock::time_point now);
  void evict_one();
  void on_readable(int fd, Connection& c, Clock::time_point now);
  void on_writable(int fd, Connection& c, Clock::time_point now);
  void answer(int fd, Connection& c, Clock::time_point now);
  void enter(int fd, Connection& c, Connection::State state, Clock::time_point now);
  void close_connection(int fd);
  // Closes the expired; returns the epoll timeout (ms) to the next deadline.
  int expire(Clock::time_point now);

  MetricsEndpoints endpoints_;
  MetricsServerOptions options_;
  std::string address_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop() wakes epoll_wait()
  bool accept_paused_ = false;
  Clock::time_point accept_resume_;
  std::map<int, Connection> connections_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace cushare::sched
